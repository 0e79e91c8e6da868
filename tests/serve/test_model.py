"""The vLLM launcher: command lines of the presets, and the life cycle of a server process.

The life-cycle tests launch a small real HTTP server in place of vLLM (an executable given as
``python`` that takes vLLM's arguments, answers ``/health`` and ``/v1/models`` as vLLM does,
and starts a worker process in its group as vLLM's engine does); the real vLLM is the
integration test's business.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import textwrap
import time
from pathlib import Path

import pytest

from sweworld.serve.model import (
    PRESETS,
    ModelServer,
    ModelServerConfig,
    ServerFailed,
    default_adapters,
)

FAKE_VLLM = textwrap.dedent(
    '''
    """Answers like vLLM's OpenAI server: /health, /v1/models (base model and LoRA names)."""
    import json, os, signal, subprocess, sys, time
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    argv = sys.argv[1:]
    assert argv[:3] == ["-m", "vllm.entrypoints.openai.api_server", "--model"], argv
    model, rest = argv[3], argv[4:]
    mode = os.environ.get("FAKE_VLLM_MODE", "ok")
    print("fake vllm starting", model, " ".join(rest), flush=True)
    if mode == "crash":
        print("ValueError: max_lora_rank 7 is not one of 1, 8, 16", flush=True)
        sys.exit(3)

    def values(flag):
        if flag not in rest:
            return []
        out = []
        for item in rest[rest.index(flag) + 1:]:
            if item.startswith("--"):
                break
            out.append(item)
        return out

    host, port = values("--host")[0], int(values("--port")[0])
    names = values("--served-model-name") or [model]
    if "--enable-lora" in rest:
        names += [item.split("=", 1)[0] for item in values("--lora-modules")]
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    with open(os.environ["FAKE_VLLM_PIDS"], "w") as f:
        f.write(f"{os.getpid()} {worker.pid}")
    ready_at = time.monotonic() + float(os.environ.get("FAKE_VLLM_DELAY", "0.3"))

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            if mode == "never" or time.monotonic() < ready_at:
                self.send_response(503); self.end_headers(); return
            if self.path == "/health":
                self.send_response(200); self.end_headers(); return
            if self.path == "/v1/models":
                body = json.dumps({"object": "list", "data": [
                    {"id": n, "object": "model"} for n in names]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers(); self.wfile.write(body); return
            self.send_response(404); self.end_headers()

    server = ThreadingHTTPServer((host, port), Handler)
    if mode == "stubborn":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    else:
        signal.signal(signal.SIGTERM, lambda *a: (_ for _ in ()).throw(SystemExit(0)))
    print("fake vllm listening", flush=True)
    try:
        server.serve_forever(0.05)
    finally:
        print("fake vllm stopped", flush=True)
    '''
)


def fake_python(folder: Path) -> Path:
    """An executable standing in for vLLM's interpreter (runs the fake server)."""
    script = folder / "fake_vllm.py"
    script.write_text(FAKE_VLLM)
    exe = folder / "python-with-vllm"
    exe.write_text(f'#!/bin/sh\nexec {sys.executable} {script} "$@"\n')
    exe.chmod(0o755)
    return exe


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (exited, not yet reaped by its parent) is not alive
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        return state != "Z"
    except OSError:
        return False


def wait_dead(pid: int, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def fake(tmp_path, monkeypatch):
    exe = fake_python(tmp_path)
    pids = tmp_path / "pids"
    monkeypatch.setenv("FAKE_VLLM_PIDS", str(pids))
    return exe, pids


def config(python: Path, **kw) -> ModelServerConfig:
    kw.setdefault("adapters", {"swt": "/ad/swt", "swr": "/ad/swr"})
    return ModelServerConfig(model="/models/base", python=str(python), port=free_port(), **kw)


# ---------------------------------------------------------------------- command lines


def test_design_point_preset_command():
    server = ModelServer(
        ModelServerConfig(
            model="/m/base",
            adapters={"swt": "/a/swt", "swr": "/a/swr"},
            preset="4x3090",
            port=8123,
            python="/venv/bin/python",
        )
    )
    cmd = server.command()
    assert cmd[:5] == [
        "/venv/bin/python",
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        "/m/base",
    ]
    joined = " ".join(cmd)
    for part in (
        "--tensor-parallel-size 4",
        "--dtype float16",
        "--enable-lora --lora-modules swt=/a/swt swr=/a/swr",
        "--max-loras 2",
        "--max-lora-rank 64",
        "--gpu-memory-utilization 0.9",
        "--host 127.0.0.1 --port 8123",
    ):
        assert part in joined
    assert server.url == "http://127.0.0.1:8123/v1"
    assert server.model_names == ["/m/base", "swt", "swr"]
    assert "VLLM_CPU_KVCACHE_SPACE" not in server.shell_command()


def test_cpu_preset_sets_kv_cache_env_and_no_gpu_memory():
    server = ModelServer(ModelServerConfig(model="m", adapters={}, preset="cpu", port=8000))
    cmd = server.command()
    assert "--gpu-memory-utilization" not in cmd
    assert "--enable-lora" not in cmd  # no adapters: no LoRA flags
    assert "--max-loras" not in cmd
    assert server.environment()["VLLM_CPU_KVCACHE_SPACE"] == PRESETS["cpu"].env[0][1]
    assert server.shell_command().startswith("VLLM_CPU_KVCACHE_SPACE=")


def test_merged_serves_under_adapter_names_without_lora():
    server = ModelServer(
        ModelServerConfig(model="/m/merged", adapters={"swt": "/a", "swr": "/b"}, merged=True)
    )
    cmd = server.command()
    assert "--enable-lora" not in cmd and "--lora-modules" not in cmd
    i = cmd.index("--served-model-name")
    assert cmd[i + 1 : i + 3] == ["swt", "swr"]
    assert server.model_names == ["swt", "swr"]


def test_extra_args_come_last_and_override():
    server = ModelServer(ModelServerConfig(model="m", adapters={}, extra_args=("--dtype", "bf16")))
    assert server.command()[-2:] == ["--dtype", "bf16"]


def test_python_from_environment(monkeypatch):
    monkeypatch.setenv("SWEWORLD_VLLM_PYTHON", "/opt/vllm/bin/python")
    assert ModelServer(ModelServerConfig(model="m", adapters={})).command()[0] == (
        "/opt/vllm/bin/python"
    )


def test_default_adapters_are_the_shipped_ones():
    adapters = default_adapters()
    assert set(adapters) <= {"swt", "swr"}
    for name, path in adapters.items():
        assert Path(path, "adapter_config.json").is_file(), name


@pytest.mark.parametrize(
    "kw",
    [
        {"preset": "8xH100"},
        {"adapters": {"a=b": "/x"}},
        {"adapters": {"swt": ""}},
        {"port": 0},
        {"model": " "},
    ],
)
def test_bad_config_is_refused(kw):
    kw = {"model": "m", **kw}
    with pytest.raises(ValueError):
        ModelServerConfig(**kw)


# ---------------------------------------------------------------------- life cycle


def test_start_wait_stop_ends_the_whole_group(fake):
    exe, pids = fake
    server = ModelServer(config(exe))
    with server:
        assert server.healthy()
        leader, worker = map(int, pids.read_text().split())
        assert alive(worker)
        log = server.log_path
        assert "fake vllm listening" in server.log_tail()
    assert not server.running()
    assert wait_dead(leader) and wait_dead(worker)
    assert not log.exists()  # the temporary log goes with the server
    server.stop()  # twice is fine


def test_server_that_dies_reports_its_log(fake):
    exe, _ = fake
    server = ModelServer(config(exe, env={"FAKE_VLLM_MODE": "crash"}))
    server.start()
    try:
        with pytest.raises(ServerFailed, match="status 3") as info:
            server.wait_healthy(timeout=30)
        assert "max_lora_rank 7" in str(info.value)
    finally:
        server.stop()
        server.cleanup()


def test_server_never_healthy_times_out(fake):
    exe, _ = fake
    server = ModelServer(config(exe, env={"FAKE_VLLM_MODE": "never"}))
    server.start()
    try:
        started = time.monotonic()
        with pytest.raises(ServerFailed, match="not healthy within"):
            server.wait_healthy(timeout=1.0)
        assert time.monotonic() - started < 5
        assert server.running()  # left running for the caller to stop
    finally:
        server.stop()
        server.cleanup()
    assert not server.running()


def test_stubborn_server_is_killed(fake):
    exe, pids = fake
    server = ModelServer(config(exe, env={"FAKE_VLLM_MODE": "stubborn"}))
    server.start()
    try:
        server.wait_healthy(timeout=30)
        leader, worker = map(int, pids.read_text().split())
        started = time.monotonic()
        server.stop(timeout=0.5)
        assert time.monotonic() - started < 5
        assert server.process.returncode == -signal.SIGKILL
        assert wait_dead(leader) and wait_dead(worker)
    finally:
        server.stop()
        server.cleanup()


def test_missing_models_keep_waiting(fake):
    """/health alone is not enough: every adapter must be listed in /v1/models."""
    exe, _ = fake
    server = ModelServer(config(exe, adapters={"swt": "/a"}))
    server.start()
    try:
        server.wait_healthy(timeout=30)
        server.config.served_model_name = "other-name"  # now /v1/models lacks "other-name"
        ready, why = server._probe()
        assert not ready and "other-name" in why
    finally:
        server.stop()
        server.cleanup()


LAUNCHER = textwrap.dedent(
    """
    import sys
    from sweworld.serve.model import ModelServer, ModelServerConfig
    python, port, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    server = ModelServer(ModelServerConfig(
        model="/models/base", python=python, port=port, env={"FAKE_VLLM_MODE": mode}))
    server.start()
    server.wait_healthy(timeout=60)
    print("ready", flush=True)
    sys.stdin.read()  # until the test kills this process
    """
)


@pytest.mark.parametrize("mode", ["ok", "stubborn"])
def test_a_killed_launcher_leaves_no_server_behind(fake, mode, monkeypatch):
    """SIGKILL the process that started the server (no stop(), no atexit): the lifeline
    sees its pipe close and ends the server and its worker; one that ignores SIGTERM is
    SIGKILLed after the grace period."""
    import subprocess

    exe, pids = fake
    monkeypatch.setenv("SWEWORLD_LIFELINE_GRACE_S", "1")
    launcher = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, str(exe), str(free_port()), mode],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert launcher.stdout.readline().strip() == "ready"
        leader, worker = map(int, pids.read_text().split())
        assert alive(leader) and alive(worker)
        launcher.kill()
        launcher.wait(timeout=10)
        assert wait_dead(leader, 15) and wait_dead(worker, 15)
    finally:
        launcher.kill()
        for pid in map(int, pids.read_text().split()) if pids.exists() else ():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_lifeline_exits_as_its_server_did(tmp_path):
    """The lifeline is transparent: the server's status, or its death by a signal."""
    import subprocess

    from sweworld.serve.model import LIFELINE

    def run(code: str) -> int:
        # stdin stays open (the launcher alive) until the server has exited
        lifeline = subprocess.Popen(
            [sys.executable, str(LIFELINE), sys.executable, "-c", code], stdin=subprocess.PIPE
        )
        try:
            return lifeline.wait(timeout=30)
        finally:
            lifeline.stdin.close()

    assert run("import sys; sys.exit(3)") == 3
    for sig in (signal.SIGTERM, signal.SIGKILL):  # an out-of-memory kill is a SIGKILL
        assert run(f"import os; os.kill(os.getpid(), {int(sig)})") == -sig
    assert run("import sys; sys.exit(len(sys.stdin.read()))") == 0  # stdin: /dev/null
    missing = subprocess.run(
        [sys.executable, str(LIFELINE), str(tmp_path / "nothing")],
        stdin=subprocess.PIPE, capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert missing.returncode == 127 and "cannot start" in missing.stderr


def test_workers_that_ignore_sigterm_do_not_outlive_the_server(tmp_path, monkeypatch):
    """The launcher goes; the server exits on the SIGTERM but its worker ignores it: the
    lifeline SIGKILLs what is left of its group before it exits."""
    import subprocess

    from sweworld.serve.model import LIFELINE

    monkeypatch.setenv("SWEWORLD_LIFELINE_GRACE_S", "30")  # the worker must not wait for it
    pid_file = tmp_path / "worker"
    server = textwrap.dedent(
        f"""
        import subprocess, sys, time
        worker = subprocess.Popen([sys.executable, "-c",
            "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(300)"])
        open({str(pid_file)!r}, "w").write(str(worker.pid))
        time.sleep(300)
        """
    )
    lifeline = subprocess.Popen(
        [sys.executable, str(LIFELINE), sys.executable, "-c", server],
        stdin=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 30
        while not pid_file.exists() or not pid_file.read_text():
            assert time.monotonic() < deadline and lifeline.poll() is None
            time.sleep(0.05)
        worker = int(pid_file.read_text())
        time.sleep(0.3)  # the worker has set its handler
        lifeline.stdin.close()  # the launcher is gone
        assert lifeline.wait(timeout=10) == -signal.SIGTERM
        assert wait_dead(worker, 10)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(lifeline.pid, signal.SIGKILL)


def test_missing_interpreter_fails_clearly(tmp_path):
    server = ModelServer(config(tmp_path / "no-such-python"))
    with pytest.raises(ServerFailed, match="cannot start"):
        server.start()
    server.cleanup()


def test_wait_without_start_fails():
    with pytest.raises(ServerFailed, match="not started"):
        ModelServer(ModelServerConfig(model="m", adapters={})).wait_healthy(timeout=1)


def _vllm_python() -> str | None:
    from sweworld.dirs import cache_dir

    env = os.environ.get("SWEWORLD_VLLM_PYTHON")
    candidate = Path(env) if env else cache_dir() / "vllm-venv" / "bin" / "python"
    return str(candidate) if candidate.is_file() else None


PARSE = """
import json, sys
from vllm.entrypoints.launchers.cli_args import make_arg_parser
from vllm.utils.argparse_utils import FlexibleArgumentParser
for argv in json.loads(sys.stdin.read()):
    a = make_arg_parser(FlexibleArgumentParser()).parse_args(argv)
    print(json.dumps([a.model, a.tensor_parallel_size, a.dtype, a.enable_lora,
                      [m.name for m in a.lora_modules or []], a.max_lora_rank,
                      a.served_model_name]))
"""


@pytest.mark.slow
def test_every_flag_parses_with_vllms_own_parser():
    """The commands of both presets (LoRA and merged) read by the installed vLLM's parser."""
    import json
    import subprocess

    python = _vllm_python()
    if python is None:
        pytest.skip("no vLLM python ($SWEWORLD_VLLM_PYTHON or the cache's vllm-venv)")
    argvs = []
    for preset in PRESETS:
        for merged in (False, True):
            cfg = ModelServerConfig(
                model="/m", adapters={"swt": "/a", "swr": "/b"}, preset=preset, merged=merged
            )
            argvs.append(ModelServer(cfg).command()[3:])  # after python -m MODULE
    done = subprocess.run(
        [python, "-c", PARSE], input=json.dumps(argvs), capture_output=True, text=True,
        timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    parsed = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("[")]
    assert parsed[0] == ["/m", 4, "float16", True, ["swt", "swr"], 64, None]  # 4x3090
    assert parsed[1][3:] == [None, [], 16, ["swt", "swr"]]  # merged: no LoRA, two names
    assert parsed[2][:5] == ["/m", 1, "float32", True, ["swt", "swr"]]  # cpu
