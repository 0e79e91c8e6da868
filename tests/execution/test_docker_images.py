"""Task images built locally (sweworld.execution.docker.images) and run on a real engine.

The engine tests need root, a Docker engine, bubblewrap and debootstrap (or a cached base
file system); without them they skip with a reason starting ``docker: ``, which
``SWEWORLD_REQUIRE_DOCKER=1`` (CI, after ``.ci/docker-up``) turns into a failure. The base
file system is built once per cache (about a minute) and each task image takes seconds.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest

from sweworld.execution.docker import base_image, images
from sweworld.execution.docker.images import (
    TEST_IMAGE,
    VENV_PATH,
    ImageBuildError,
    build_task_image,
    build_test_image,
)
from sweworld.execution.envs import EnvBuilder, EnvRecipe
from sweworld.execution.grading import test_failed, test_passed
from sweworld.execution.log_parsers import parse_pytest_log
from tests.conftest import requires_sandbox

# ---------------------------------------------------------------------- without an engine


def test_an_unreachable_engine_is_a_clear_error(monkeypatch, toy_task):
    monkeypatch.setenv("DOCKER_HOST", f"unix:///nonexistent/{uuid.uuid4().hex}.sock")
    pytest.importorskip("docker", reason="docker: the docker package is not installed")
    with pytest.raises(ImageBuildError, match="no Docker engine answers"):
        build_task_image(toy_task)


@pytest.mark.parametrize("instance_id", ["Bad Name!", "a:b", "x/../y", "z" * 300])
def test_an_instance_id_that_makes_no_image_name_is_refused_before_any_work(
    monkeypatch, toy_task, instance_id
):
    def no_engine(client):
        raise AssertionError("the engine was asked before the name was checked")

    monkeypatch.setattr(images, "_client", no_engine)
    task = toy_task.model_copy(update={"instance_id": instance_id})
    with pytest.raises(ImageBuildError, match="is no valid image name"):
        build_task_image(task)
    for good in (TEST_IMAGE, images.base_image_name(), "localhost:5000/a/b:v1", "ubuntu"):
        assert images.check_image_name(good) == good


def test_host_pip_folders_are_shown_under_the_build_mount(tmp_path, monkeypatch):
    index = tmp_path / "pypi" / "simple"
    index.mkdir(parents=True)
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    conf = tmp_path / "pip.conf"
    conf.write_text(
        f"[global]\nextra-index-url = file://{index} https://example.org/simple\n"
        f"find-links = {wheels}\ncache-dir = /somewhere\ntimeout = 7\n"
    )
    for key in list(os.environ):
        if key.startswith("PIP_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    env, binds = images._host_pip_settings()
    real = Path(os.path.realpath(tmp_path))
    host = images.HOST_MOUNT
    assert env["PIP_EXTRA_INDEX_URL"] == (
        f"file://{host}{real}/pypi/simple https://example.org/simple"
    )
    assert env["PIP_FIND_LINKS"] == f"{host}{real}/wheels" and env["PIP_TIMEOUT"] == "7"
    assert "PIP_CACHE_DIR" not in env  # the build's own cache is used
    # an index folder is shown with its parent: its pages link to ../../files
    ours = [bind for bind in binds if bind[0].startswith(str(real))]
    assert ours == [
        (str(real / "pypi"), f"{host}{real}/pypi"),
        (str(real / "wheels"), f"{host}{real}/wheels"),
    ]


def test_activate_shim_is_a_conda_function_over_virtualenvs(tmp_path):
    shim = images.ACTIVATE_SHIM.replace(images.ENV_PREFIX, str(tmp_path))
    (tmp_path / "activate").write_text(shim)
    venv = tmp_path / "envs" / "testbed" / "bin"
    venv.mkdir(parents=True)
    (venv / "activate").write_text("export ACTIVE=testbed\ndeactivate() { unset ACTIVE; }\n")
    script = (
        f'. {tmp_path}/activate && conda activate testbed && echo "on:$ACTIVE" && '
        'conda deactivate && echo "off:${ACTIVE:-}"; conda activate nope; echo "rc:$?"; '
        'conda install x; echo "rc:$?"'
    )
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True)
    assert out.stdout.split() == ["on:testbed", "off:", "rc:1", "rc:1"], out.stderr
    assert "no environment named nope" in out.stderr


# ---------------------------------------------------------------------- a real engine


def _engine_problem() -> str:
    if os.geteuid() != 0:
        return "docker: building images needs root"
    try:
        import docker
    except ImportError:
        return "docker: the docker package is not installed"
    try:
        docker.from_env(timeout=20).ping()
    except Exception as exc:
        return f"docker: no Docker engine answers: {exc}"
    if shutil.which("bwrap") is None:
        return "docker: bubblewrap is not installed"
    cached = list(
        images.docker_cache_dir().glob(f"base-{images.SUITE}-{base_image._base_key()}/ok")
    )
    if not cached and shutil.which("debootstrap") is None:
        return "docker: debootstrap is not installed and no base file system is cached"
    return ""


_PROBLEM = _engine_problem()
real_engine = pytest.mark.skipif(bool(_PROBLEM), reason=_PROBLEM or "docker: no engine")


@pytest.fixture(scope="module")
def engine():
    import docker

    client = docker.from_env(timeout=600)
    yield client
    client.close()


@pytest.fixture(scope="module")
def toy_image(engine, manager, toy_task):
    return build_task_image(toy_task, manager=manager, client=engine)


def _run(engine, image: str, script: str, **env: str) -> str:
    out = engine.containers.run(
        image,
        ["bash", "-c", script],
        environment=env,
        network_disabled=True,
        remove=True,
        stdout=True,
        stderr=True,
    )
    return out.decode(errors="replace")


ACTIVATE = "source /opt/miniconda3/bin/activate && conda activate testbed"


@pytest.mark.docker
@pytest.mark.slow
@real_engine
@requires_sandbox
class TestToyImage:
    def test_toy_image_grades_the_task_at_base(self, engine, toy_image, toy_task):
        """PASS_TO_PASS pass and FAIL_TO_PASS fail at the base commit (test patch applied)."""
        assert toy_image.name == images.swebench_image_name(toy_task.instance_id)
        script = (
            'printf "%s" "$TEST_PATCH" | git apply - && '
            f"{ACTIVATE} && python -m pytest -rA -p no:cacheprovider tests; true"
        )
        log = _run(engine, toy_image.name, script, TEST_PATCH=toy_task.test_patch)
        statuses = parse_pytest_log(log)
        assert toy_task.PASS_TO_PASS and toy_task.FAIL_TO_PASS
        for test in toy_task.PASS_TO_PASS:
            assert test_passed(test, statuses), (test, log[-2000:])
        for test in toy_task.FAIL_TO_PASS:
            assert test_failed(test, statuses), (test, log[-2000:])

    def test_activation_testbed_git_and_tools(self, engine, toy_image, toy_task):
        script = (
            f"{ACTIVATE} && command -v python && python -c 'import stockroom, pytest' && "
            "git rev-parse HEAD && git status --porcelain && echo clean && "
            "command -v timeout bash && pwd"
        )
        lines = _run(engine, toy_image.name, script).split()
        assert lines[0] == f"{VENV_PATH}/bin/python", lines
        assert lines[1] == toy_task.base_commit, lines
        assert lines[2] == "clean", lines  # the install left the working tree clean
        assert lines[-1] == "/testbed" and lines[3].endswith("/timeout"), lines

    def test_a_second_build_is_up_to_date(self, engine, manager, toy_image, toy_task):
        again = build_task_image(toy_task, manager=manager, client=engine)
        assert again.cached and again.image_id == toy_image.image_id
        assert again.seconds < 30

    def test_the_test_image_has_python_bash_and_coreutils(self, engine):
        build = build_test_image(client=engine)
        assert build.name == TEST_IMAGE
        out = _run(engine, TEST_IMAGE, "python --version && timeout 5 true && echo ok")
        assert out.split()[-1] == "ok" and out.startswith("Python 3.")


@pytest.mark.docker
@pytest.mark.slow
@real_engine
@requires_sandbox
def test_a_failing_recipe_raises_with_its_log_and_leaves_nothing(
    engine, manager, toy_task, tmp_path, monkeypatch
):
    from sweworld.execution.docker.images import image_present

    scratch = tmp_path / "scratch"  # the build's temporary folders go here
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))

    name = f"sweworld-test/failing:{uuid.uuid4().hex[:8]}"
    builder = EnvBuilder(default=EnvRecipe(packages=(), install=("echo recipe-marker-42; exit 3",)))
    with pytest.raises(ImageBuildError) as caught:
        build_task_image(toy_task, manager=manager, client=engine, builder=builder, name=name)
    assert "failed (exit 3)" in caught.value.message
    assert "recipe-marker-42" in caught.value.log_tail
    assert image_present(engine, name) is None
    assert list(scratch.iterdir()) == []
    assert base_image._mounts_under(scratch) == []


# ---------------------------------------------------------------------- the command line


def test_build_names_an_unknown_instance(capsys):
    from sweworld.cli import main
    from sweworld.tasks.toy import toy_tasks_path

    with pytest.raises(SystemExit, match="no task nope__nope-1 in"):
        main(["docker", "build", "--tasks", str(toy_tasks_path()), "--id", "nope__nope-1"])


@pytest.mark.docker
@real_engine
@requires_sandbox
def test_status_lists_the_images_of_tasks(capsys, toy_image, toy_task):
    from sweworld.execution.docker.cli import main
    from sweworld.tasks.toy import toy_tasks_path

    code = main(["status", "--tasks", str(toy_tasks_path())])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("engine: Docker ")
    assert f"{toy_task.instance_id}: {toy_image.name}" in lines
    others = [line for line in lines[1:] if not line.startswith(toy_task.instance_id + ":")]
    assert code == (1 if any("no image" in line for line in others) else 0)
