"""``sweworld serve``: the command group, ``serve model``'s help, dry run, and a foreground
run against a stand-in server (see :mod:`tests.serve.test_model`) stopped by a signal."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from sweworld.cli import main
from tests.serve.test_model import fake_python, free_port, wait_dead


def test_help_shows_the_design_point_preset(capsys):
    with pytest.raises(SystemExit) as info:
        main(["serve", "model", "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert "4x3090" in out and "4 x RTX 3090" in out
    assert "--tensor-parallel-size 4 --dtype float16" in out
    assert "cpu" in out and "VLLM_CPU_KVCACHE_SPACE" in out


def test_dry_run_prints_the_command(capsys):
    code = main(
        ["serve", "model", "--preset", "4x3090", "--model", "/m/base", "--adapter", "swt=/a/swt",
         "--adapter", "swr=/a/swr", "--port", "8123", "--python", "/venv/bin/python",
         "--dry-run", "--vllm-arg=--max-num-seqs", "--vllm-arg=128"]
    )  # fmt: skip
    assert code == 0
    out = capsys.readouterr().out.strip()
    assert out.startswith("/venv/bin/python -m vllm.entrypoints.openai.api_server --model /m/base")
    assert "--lora-modules swt=/a/swt swr=/a/swr" in out
    assert "--tensor-parallel-size 4 --dtype float16" in out
    assert out.endswith("--max-num-seqs 128")


def test_dry_run_defaults_to_the_embedded_model_and_shipped_adapters(capsys):
    assert main(["serve", "model", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "smollm2-135m-instruct" in out
    assert "swt=" in out and "swt-default" in out and "swr-default" in out


@pytest.mark.parametrize("adapter", ["swt", "=path", "swt="])
def test_bad_adapter_option_is_a_clear_error(adapter, capsys):
    assert main(["serve", "model", "--dry-run", "--adapter", adapter]) == 2
    assert "NAME=PATH" in capsys.readouterr().err


def test_serve_needs_a_sub_command(capsys):
    with pytest.raises(SystemExit) as info:
        main(["serve"])
    assert info.value.code == 2


def _serve(tmp_path, *extra: str, env: dict[str, str] | None = None):
    exe = fake_python(tmp_path)
    port = free_port()
    environ = {**os.environ, "FAKE_VLLM_PIDS": str(tmp_path / "pids"), **(env or {})}
    proc = subprocess.Popen(
        [sys.executable, "-m", "sweworld", "serve", "model", "--python", str(exe), "--model",
         "/m/base", "--adapter", "swt=/a/swt", "--adapter", "swr=/a/swr", "--port", str(port),
         "--timeout", "60", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environ,
    )  # fmt: skip
    return proc, port


def _read_until_ready(proc) -> list[str]:
    lines = []
    for line in proc.stdout:
        lines.append(line.rstrip("\n"))
        if line.startswith("ready"):
            return lines
    raise AssertionError(f"no 'ready' line: {lines}; stderr: {proc.stderr.read()}")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_foreground_server_prints_endpoint_and_stops_on_signal(tmp_path, sig):
    proc, port = _serve(tmp_path)
    try:
        lines = _read_until_ready(proc)
        url = f"http://127.0.0.1:{port}/v1"
        assert f"endpoint: {url}" in lines
        assert f"model: openai:{url}#swt" in lines
        assert f"model: openai:{url}#swr" in lines
        leader, worker = map(int, (tmp_path / "pids").read_text().split())
        proc.send_signal(sig)
        assert proc.wait(timeout=30) == 0
        assert wait_dead(leader) and wait_dead(worker)
        assert "stopping the server" in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_foreground_server_that_dies_exits_1_with_its_log(tmp_path):
    proc, _ = _serve(tmp_path, env={"FAKE_VLLM_MODE": "crash"})
    try:
        assert proc.wait(timeout=60) == 1
        err = proc.stderr.read()
        assert "exited with status 3" in err and "max_lora_rank 7" in err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_signal_while_waiting_for_health_stops_the_server(tmp_path):
    proc, _ = _serve(tmp_path, env={"FAKE_VLLM_MODE": "never"})
    try:
        pids = tmp_path / "pids"
        deadline = time.monotonic() + 30
        while not pids.exists() or not pids.read_text().strip():
            assert time.monotonic() < deadline, proc.stderr.read()
            time.sleep(0.05)
        leader, worker = map(int, pids.read_text().split())
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        assert wait_dead(leader) and wait_dead(worker)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_serve_world_is_wired(capsys):
    pytest.importorskip("fastapi")
    with pytest.raises(SystemExit) as info:
        main(["serve", "world", "--help"])
    assert info.value.code == 0
    assert "--token" in capsys.readouterr().out
