"""Task environment images built on this machine, for engines that cannot reach a registry.

The images have the layout of SWE-bench's evaluation images, so the :class:`DockerExecutor`
finds and drives them unchanged (its default image name and its default activation), but
they are not conda: the environment is a virtualenv.

- ``/testbed``: the task's repository at its base commit (the session manager's base
  checkout, setup patch included) with its ``.git``, so that reverts can use git;
- ``/opt/miniconda3/envs/testbed``: a virtualenv of the image's Python with the task's
  install recipe, the one the LocalExecutor installs (:meth:`EnvBuilder.plan
  <sweworld.execution.envs.EnvBuilder.plan>`: the task environment's recipe and pinned
  pytest, else ``pip install pytest`` and ``pip install -e .``);
- ``/opt/miniconda3/bin/activate``: a shell file defining a small ``conda`` function, so
  ``source /opt/miniconda3/bin/activate && conda activate testbed`` activates that
  virtualenv; bash, coreutils (``timeout``) and git are in the base.

Every image starts from one base: a Debian root file system made once by ``debootstrap``
(``minbase`` with Python, venv, git and CA certificates), cached under
``<cache>/docker/base-<key>/rootfs`` (``$SWEWORLD_CACHE``, default ``~/.cache/sweworld``)
and imported into the engine as ``sweworld/base:<key>``. A task image is that base plus one
layer (``/testbed`` and ``/opt/miniconda3``). The virtualenv is built outside the engine, in
a bubblewrap sandbox whose root is the base file system (read-only) with the two output
folders writable, the host's network, DNS and CA bundle, and the host's pip settings (their
local index and wheel folders shown read-only): so the image's own Python builds it with
the packages the LocalExecutor's build would get. The sandbox's mounts end with it.

A build that fails (no engine, not root, a recipe or pip failure) raises
:class:`ImageBuildError` with the tail of its log and leaves no image and no temporary
folder behind. Building needs root (debootstrap, bubblewrap with a foreign root, the engine).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import asdict
from pathlib import Path
from types import MappingProxyType
from typing import Any

from sweworld.dirs import cache_dir
from sweworld.execution.docker.base_image import (  # re-exported: the base's names
    ACTIVATE_SHIM,
    ENV_PREFIX,
    HOST_MOUNT,
    IMAGE_KEY_LABEL,
    LAYOUT,
    PIP_CACHE_MOUNT,
    PIP_OWN_SETTINGS,
    SUITE,
    TEST_IMAGE,
    VENV_PATH,
    ImageBuild,
    ImageBuildError,
    base_image_name,
    base_python,
    build_base_rootfs,
    docker_cache_dir,
    tail_of,
)
from sweworld.execution.docker.naming import swebench_image_name
from sweworld.sandbox.launch import BUILD_PASSTHROUGH

__all__ = [
    "ACTIVATE_SHIM",
    "ENV_PREFIX",
    "LAYOUT",
    "SUITE",
    "TEST_IMAGE",
    "VENV_PATH",
    "ImageBuild",
    "ImageBuildError",
    "base_image_name",
    "build_base_rootfs",
    "build_task_image",
    "build_test_image",
    "check_image_name",
    "docker_cache_dir",
    "image_present",
]


def _client(client: Any) -> Any:
    if client is not None:
        return client
    try:
        import docker
    except ImportError as exc:
        raise ImageBuildError(
            "sweworld: the docker package is not installed (pip install 'sweworld[docker]')"
        ) from exc
    try:
        engine = docker.from_env(timeout=600)
        engine.ping()
    except Exception as exc:
        raise ImageBuildError(f"sweworld: no Docker engine answers: {exc}") from exc
    return engine


def image_present(client: Any, name: str) -> Any:
    """The engine's image ``name``, or None when it has none."""
    try:
        return client.images.get(name)
    except Exception as exc:
        if "NotFound" in [k.__name__ for k in type(exc).__mro__]:
            return None
        raise


def ensure_base_image(
    client: Any, cache: str | Path | None = None, *, rebuild: bool = False
) -> tuple[str, Path]:
    """The base image on the engine (imported from :func:`build_base_rootfs`) and the
    root file system it came from."""
    rootfs = build_base_rootfs(cache, rebuild=rebuild)
    name = base_image_name()
    if image_present(client, name) is not None and not rebuild:
        return name, rootfs
    repository, _, tag = name.rpartition(":")
    tar = subprocess.Popen(
        ["tar", "--numeric-owner", "-C", str(rootfs), "-c", "."],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    changes = [
        "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "ENV LANG=C.UTF-8",
        'CMD ["bash"]',
    ]
    try:
        client.api.import_image(
            src=tar.stdout, repository=repository, tag=tag, changes=changes, stream_src=True
        )
    except Exception as exc:
        raise ImageBuildError(f"sweworld: importing the base image {name} failed: {exc}") from exc
    finally:
        tar.kill()
        _, err = tar.communicate()
    if tar.returncode not in (0, -9):
        raise ImageBuildError(f"sweworld: tar of {rootfs} failed", err.decode(errors="replace"))
    return name, rootfs


#: An image reference the engine accepts: ``[host[:port]/]path[:tag]`` with lowercase
#: path components (Docker's reference grammar, digests left out).
_REFERENCE = re.compile(
    r"(?:(?:localhost|[a-zA-Z0-9-]+(?:\.[a-zA-Z0-9-]+)+)(?::\d+)?/|[a-zA-Z0-9-]+:\d+/)?"
    r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*"
    r"(?::[\w][\w.-]{0,127})?"
)


def check_image_name(name: str) -> str:
    """``name`` when the engine can tag an image with it, else :class:`ImageBuildError`
    (an instance id with spaces, ``..`` or ``:`` makes no name): said before any build
    work, not after the install recipe ran."""
    if len(name) > 255 or not _REFERENCE.fullmatch(name):
        raise ImageBuildError(f"sweworld: {name[:300]!r} is no valid image name")
    return name


def build_test_image(
    *, client: Any = None, cache: str | Path | None = None, rebuild: bool = False
) -> ImageBuild:
    """:data:`TEST_IMAGE`: the base (bash, coreutils, git, ``python``) under a stable name,
    for the executor's generic real-engine tests (``SWEWORLD_DOCKER_TEST_IMAGE``)."""
    started = time.monotonic()
    client = _client(client)
    base, _ = ensure_base_image(client, cache, rebuild=rebuild)
    image = client.images.get(base)
    existing = image_present(client, TEST_IMAGE)
    built = existing is None or existing.id != image.id
    if built:
        repository, _, tag = TEST_IMAGE.rpartition(":")
        image.tag(repository, tag)
    return ImageBuild(TEST_IMAGE, time.monotonic() - started, built, "", image.id, base)


# ---------------------------------------------------------------------- task images


def _host_pip_settings() -> tuple[dict[str, str], list[tuple[str, str]]]:
    """The host's pip settings as ``PIP_*`` variables, with local paths moved under
    ``/run/sweworld/host``, and the ``(host, sandbox)`` paths to show read-only."""
    try:
        out = subprocess.run(
            ["python3", "-m", "pip", "config", "list"],
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {}, []
    env: dict[str, str] = {}
    binds: dict[str, str] = {}
    for line in out.splitlines():
        key, sep, value = line.partition("=")
        if not sep:
            continue
        name = key.rpartition(".")[2].strip()
        if name in PIP_OWN_SETTINGS:
            continue
        value = value.strip().strip("'\"")
        words = []
        for word in value.split():
            path = word.removeprefix("file://")
            if path.startswith("/") and os.path.exists(path):
                real = os.path.realpath(path)
                inside = HOST_MOUNT + real
                # an index folder's pages link to their siblings (``../../files/...``)
                shown = os.path.dirname(real) if os.path.basename(real) == "simple" else real
                binds[shown] = HOST_MOUNT + shown
                word = ("file://" if word.startswith("file://") else "") + inside
            words.append(word)
        env["PIP_" + name.upper().replace("-", "_")] = " ".join(words)
    return env, sorted(binds.items())


def _host_ca_bundle() -> str | None:
    for candidate in (
        os.environ.get("PIP_CERT"),
        os.environ.get("SSL_CERT_FILE"),
        os.environ.get("REQUESTS_CA_BUNDLE"),
        "/etc/ssl/certs/ca-certificates.crt",
    ):
        if candidate and os.path.isfile(candidate):
            return candidate
    return None


def _sandbox_argv(
    rootfs: Path,
    context: Path,
    pip_cache: Path,
    script: str,
    build_env: Mapping[str, str] = MappingProxyType({}),
) -> list[str]:
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise ImageBuildError("sweworld: bubblewrap is not installed (apt-get install bubblewrap)")
    pip_env, pip_binds = _host_pip_settings()
    argv = [bwrap, "--die-with-parent", "--unshare-pid", "--unshare-ipc"]
    argv += ["--ro-bind", str(rootfs), "/", "--proc", "/proc", "--dev", "/dev"]
    argv += ["--tmpfs", "/tmp", "--tmpfs", "/root", "--tmpfs", "/run", "--tmpfs", "/opt"]
    argv += ["--bind", str(context / "testbed"), "/testbed"]
    argv += ["--bind", str(context / "miniconda3"), ENV_PREFIX]
    argv += ["--bind", str(pip_cache), PIP_CACHE_MOUNT]
    if os.path.isfile("/etc/resolv.conf"):
        argv += ["--ro-bind", os.path.realpath("/etc/resolv.conf"), "/etc/resolv.conf"]
    env = {
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": "/root",
        "LANG": "C.UTF-8",
        "PIP_CACHE_DIR": PIP_CACHE_MOUNT,
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        **{k: v for k, v in os.environ.items() if k in BUILD_PASSTHROUGH and "proxy" in k.lower()},
        **pip_env,
        **build_env,  # the plan's (setuptools_scm's version of the project)
    }
    ca = _host_ca_bundle()
    if ca is not None:  # the host's bundle (a TLS-intercepting proxy's CA among them)
        argv += ["--ro-bind", ca, "/etc/ssl/certs/ca-certificates.crt"]
        for key in ("PIP_CERT", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE"):
            env[key] = "/etc/ssl/certs/ca-certificates.crt"
    for host, inside in pip_binds:
        argv += ["--ro-bind", host, inside]
    argv += ["--clearenv"]
    for key, value in env.items():
        argv += ["--setenv", key, value]
    return [*argv, "--chdir", "/testbed", "bash", "-c", script]


def _image_key(
    task: Any,
    base: str,
    head: str,
    recipe: Any,
    build_env: Mapping[str, str] = MappingProxyType({}),
) -> str:
    blob = json.dumps(
        [
            LAYOUT,
            base,
            getattr(task, "repo", ""),
            getattr(task, "instance_id", ""),
            getattr(task, "base_commit", ""),
            head,
            hashlib.sha256((getattr(task, "setup_patch", "") or "").encode()).hexdigest(),
            asdict(recipe),
            dict(build_env),
        ],
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


@contextlib.contextmanager
def _context_tar(context: Path, dockerfile: str) -> Iterator[Any]:
    """The build context (Dockerfile, ``testbed/``, ``miniconda3/``) as a tar file."""
    with tempfile.TemporaryFile(dir=context) as handle:
        with tarfile.open(fileobj=handle, mode="w") as tar:
            data = dockerfile.encode()
            info = tarfile.TarInfo("Dockerfile")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
            tar.add(context / "miniconda3", "miniconda3")
            tar.add(context / "testbed", "testbed")
        handle.seek(0)
        yield handle


def _checkout(task: Any, manager: Any) -> tuple[Path, str]:
    """The task's base checkout (its path and HEAD) from ``manager`` or a new one."""
    from sweworld.sandbox.manager import SessionManager

    own = SessionManager() if manager is None else None
    try:
        base = (manager or own).checkout(task)
    except Exception as exc:  # no local copy of the repository, a setup patch that fails
        raise ImageBuildError(
            f"sweworld: no base checkout of {getattr(task, 'instance_id', task)}: {exc}"
        ) from exc
    finally:
        if own is not None:
            own.close_all()
    return Path(base.path), base.head


def build_task_image(
    task: Any,
    *,
    manager: Any = None,
    client: Any = None,
    rebuild: bool = False,
    builder: Any = None,
    name: str | None = None,
    cache: str | Path | None = None,
    timeout: float = 1800.0,
) -> ImageBuild:
    """Build (or find up to date) the SWE-bench-layout image of ``task``.

    Args:
        task: a :class:`~sweworld.tasks.Task` (its repository must be findable: the toy
            repository, ``$SWEWORLD_REPO_CACHE``, ...).
        manager: the session manager whose base checkout goes to ``/testbed`` (default: a
            new one).
        client: a docker SDK client (default: ``docker.from_env()``).
        rebuild: build even when an up-to-date image (same key label) exists.
        builder: the :class:`~sweworld.execution.envs.EnvBuilder` whose recipe is installed
            (default: the LocalExecutor's default builder).
        name: the image's name (default: :func:`swebench_image_name` of the instance).
        cache: where the base file system is kept (default ``<cache>/docker``).
        timeout: seconds the install recipe may take.

    Raises:
        ImageBuildError: with the tail of the log; no image and no temporary folder is left.
    """
    from sweworld.execution.envs import EnvBuilder

    started = time.monotonic()
    name = check_image_name(name or swebench_image_name(str(task.instance_id)))
    client = _client(client)
    base_path, head = _checkout(task, manager)
    plan = (builder or EnvBuilder()).plan(task, base_path)
    recipe = plan.recipe
    base, rootfs = ensure_base_image(client, cache)
    key = _image_key(task, base, head, recipe, plan.build_env)
    existing = image_present(client, name)
    if existing is not None and not rebuild and existing.labels.get(IMAGE_KEY_LABEL) == key:
        return ImageBuild(name, time.monotonic() - started, False, "", existing.id, base)
    python = base_python(rootfs)
    note = ""
    if plan.requested and python and plan.requested != python:
        note = f"the task's environment is Python {plan.requested}; the image has {python}"
    script = recipe.script("/usr/bin/python3", venv=VENV_PATH)
    pip_cache = cache_dir() / "pip"
    pip_cache.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="sweworld-image-"))
    try:
        context = work / "context"
        shutil.copytree(base_path, context / "testbed", symlinks=True)
        (context / "miniconda3" / "envs").mkdir(parents=True)
        (context / "miniconda3" / "bin").mkdir()
        (context / "miniconda3" / "bin" / "activate").write_text(ACTIVATE_SHIM)
        argv = _sandbox_argv(rootfs, context, pip_cache, script, plan.build_env)
        try:
            proc = subprocess.run(
                argv,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired as exc:
            out = (exc.stdout or b"").decode(errors="replace")
            raise ImageBuildError(
                f"sweworld: the install recipe of {task.instance_id} ran past {timeout:.0f} s",
                tail_of(out),
            ) from exc
        log = f"$ {shlex.join(['bash', '-c', script])}\n" + proc.stdout.decode(errors="replace")
        if note:
            log = f"sweworld: {note}\n{log}"
        if proc.returncode != 0:
            raise ImageBuildError(
                f"sweworld: the install recipe of {task.instance_id} failed "
                f"(exit {proc.returncode})",
                tail_of(log),
            )
        labels = {
            IMAGE_KEY_LABEL: key,
            "sweworld.instance-id": str(task.instance_id),
            "sweworld.layout": "swebench-venv",
        }
        dockerfile = (
            f"FROM {base}\nCOPY miniconda3 {ENV_PREFIX}\nCOPY testbed /testbed\nWORKDIR /testbed\n"
        )
        with _context_tar(context, dockerfile) as fileobj:
            try:
                image, stream = client.images.build(
                    fileobj=fileobj,
                    custom_context=True,
                    tag=name,
                    labels=labels,
                    rm=True,
                    forcerm=True,
                    pull=False,
                )
            except Exception as exc:
                lines = getattr(exc, "build_log", None) or []
                text = "".join(str(e.get("stream", e.get("error", ""))) for e in lines)
                raise ImageBuildError(
                    f"sweworld: the engine failed building {name}: {exc}", tail_of(log + text)
                ) from exc
        log += "".join(str(e.get("stream", "")) for e in stream)
        if existing is not None and existing.id != image.id:  # the image it replaces
            with contextlib.suppress(Exception):  # still used by a container: kept
                client.images.remove(existing.id)
        return ImageBuild(
            name, time.monotonic() - started, True, tail_of(log), image.id, base, note
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
