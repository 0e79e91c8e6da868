"""DockerExecutor: image naming, sync and exec against a fake client, and a real engine.

The fake client below stands in for the few docker SDK objects the executor calls (images,
containers.run, put_archive, remove, api.exec_create / exec_start / exec_inspect): it keeps
each container's files in a dict, applies the sync archives for real with ``tarfile``, and
understands only the handful of commands the executor sends. ``TestRealEngine`` runs the
same paths against a real Docker engine when one answers.
"""

from __future__ import annotations

import io
import os
import posixpath
import shutil
import stat
import sys
import tarfile
import threading
import time
import types
import uuid

import pytest

from sweworld.execution import ExecutionRequest
from sweworld.execution.docker import (
    CONTROL_DIR,
    DEFAULT_ACTIVATE,
    INSTALL_HINT,
    KEEPALIVE_SCRIPT,
    KILL_ARGV,
    LIST_MARKER,
    REVERT_MARKER,
    RUN_MARKER,
    DockerExecutor,
    swebench_image_name,
)
from sweworld.sandbox.workspace import CopyWorkspace, WorkspaceChanges
from tests.conftest import requires_sandbox

# ---------------------------------------------------------------------- image names
# Checked against SWE-bench's harness (swebench/harness/test_spec/test_spec.py,
# TestSpec.instance_image_key): key = f"sweb.eval.{arch}.{instance_id.lower()}:{tag}", and
# for a namespace f"{namespace}/{key}".replace("__", "_1776_").


def test_swebench_image_names_follow_the_harness():
    assert (
        swebench_image_name("django__django-11099")
        == "swebench/sweb.eval.x86_64.django_1776_django-11099:latest"
    )
    assert (
        swebench_image_name("astropy__astropy-14096")
        == "swebench/sweb.eval.x86_64.astropy_1776_astropy-14096:latest"
    )
    assert (
        swebench_image_name("sphinx-doc__sphinx-8721", arch="arm64", tag="v2")
        == "swebench/sweb.eval.arm64.sphinx-doc_1776_sphinx-8721:v2"
    )
    # the local key (as the harness builds it): no namespace, `__` kept
    assert (
        swebench_image_name("django__django-11099", namespace=None)
        == "sweb.eval.x86_64.django__django-11099:latest"
    )
    assert swebench_image_name("x__y-1", namespace="") == "sweb.eval.x86_64.x__y-1:latest"
    # instance ids are lowercased (Docker names must be)
    assert (
        swebench_image_name("Project-MONAI__MONAI-5093")
        == "swebench/sweb.eval.x86_64.project-monai_1776_monai-5093:latest"
    )
    assert (
        swebench_image_name("pydata__xarray-4094", namespace="myorg")
        == "myorg/sweb.eval.x86_64.pydata_1776_xarray-4094:latest"
    )


# ---------------------------------------------------------------------- the fake client


class DockerException(Exception):
    pass


class APIError(DockerException):
    def __init__(self, message: str, status_code: int = 500):
        super().__init__(message)
        self.status_code = status_code


class NotFound(APIError):
    def __init__(self, message: str):
        super().__init__(message, 404)


class ImageNotFound(NotFound):
    pass


class FakeContainer:
    def __init__(self, client: FakeClient, image: str, kwargs: dict):
        self.client = client
        self.id = uuid.uuid4().hex + uuid.uuid4().hex
        self.image = image
        self.kwargs = kwargs
        self.base = {p: ("file", d, 0o644) for p, d in client.image_files[image].items()}
        self.files: dict[str, tuple[str, bytes | str, int]] = dict(self.base)
        self.archives: list[list[str]] = []  # member paths of each put_archive
        self.execs: list[list[str]] = []
        self.runs: list[types.SimpleNamespace] = []
        self.listings: list[list[str]] = []  # copy-back listings asked for
        self.removed = self.stopped = self.killed = False
        self.busy = threading.Lock()  # a run in progress (commands must not overlap)

    def text(self, path: str) -> str:
        kind, data, _ = self.files[path]
        assert kind == "file"
        return data.decode()

    def _drop(self, path: str) -> None:
        for key in [k for k in self.files if k == path or k.startswith(path + "/")]:
            del self.files[key]

    # docker SDK surface
    def put_archive(self, path: str, data) -> bool:
        if self.removed:
            raise NotFound("No such container")
        raw = data.read() if hasattr(data, "read") else data
        names = []
        with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
            for member in tar.getmembers():
                dest = posixpath.normpath(posixpath.join(path, member.name))
                parts = dest.split("/")
                for i in range(2, len(parts)):  # a file where a directory must go: replaced
                    self.files.pop("/".join(parts[:i]), None)
                self._drop(dest)
                if member.issym():
                    self.files[dest] = ("link", member.linkname, member.mode)
                elif member.isfile():
                    handle = tar.extractfile(member)
                    assert handle is not None
                    self.files[dest] = ("file", handle.read(), member.mode)
                names.append(dest)
        self.archives.append(names)
        return True

    def remove(self, force: bool = False) -> None:
        assert force
        self.removed = True

    # the commands the executor sends
    def exec(self, cmd: list[str], environment, workdir):
        if tuple(cmd) == KILL_ARGV:
            self.killed = True
            return 0, b"", b""
        if cmd[:3] == ["rm", "-rf", "--"]:
            for path in cmd[3:]:
                self._drop(path)
            return 0, b"", b""
        if cmd[:2] == ["bash", "-c"] and cmd[3] == REVERT_MARKER:
            tree, ref, *paths = cmd[4:]
            self.client.reverts.append((ref, paths))
            for rel in paths:
                full = f"{tree}/{rel}"
                if full in self.base:
                    self.files[full] = self.base[full]
                else:
                    self._drop(full)
            return 0, b"", b""
        if cmd[:2] == ["bash", "-lc"] and cmd[3] == RUN_MARKER:
            activate, cwd, limit, stdin_file, front, back, marker, *argv = cmd[4:]
            stdin = self.files.pop(stdin_file)[1] if stdin_file else b""
            run = types.SimpleNamespace(
                argv=argv,
                cwd=cwd,
                env=environment,
                workdir=workdir,
                activate=activate,
                limit=limit,
                stdin=stdin,
                path_front=front,
                path_back=back,
                marker=marker,
            )
            self.runs.append(run)
            self.killed = False
            return self.client.responder(self, run)
        if cmd[:2] == ["bash", "-c"] and cmd[3] == LIST_MARKER:
            self.listings.append(cmd[5:])
            return 0, b"", b""  # the fake's commands change nothing in the container
        raise AssertionError(f"the fake does not know this command: {cmd}")


class FakeAPI:
    def __init__(self, client: FakeClient):
        self.client = client
        self.pending: dict[str, tuple] = {}
        self.exit_codes: dict[str, int | None] = {}

    def exec_create(
        self, container_id, cmd, stdout=True, stderr=True, environment=None, workdir=None
    ):
        container = self.client.by_id[container_id]
        if container.removed:
            raise NotFound(f"No such container: {container_id}")
        if container.stopped:
            raise APIError(f"Container {container_id} is not running", 409)
        exec_id = uuid.uuid4().hex
        self.pending[exec_id] = (container, list(cmd), environment, workdir)
        container.execs.append(list(cmd))
        return {"Id": exec_id}

    def exec_start(self, exec_id, stream=False, demux=False):
        container, cmd, environment, workdir = self.pending[exec_id]
        outcome = container.exec(cmd, environment, workdir)
        if isinstance(outcome, tuple):  # (exit code, stdout, stderr)
            code, out, err = outcome
            chunks = [c for c in ((out or None, None), (None, err or None)) if any(c)]
        else:  # an iterator of (stdout, stderr) chunks: stops with 137 when killed
            code, chunks = None, outcome
        if not stream:
            self.exit_codes[exec_id] = code
            return b"".join(o or b"" for o, _ in chunks)
        assert demux

        def frames():
            with container.busy if cmd[3:4] == [RUN_MARKER] else _nothing():
                yield from chunks
                self.exit_codes[exec_id] = (
                    code if code is not None else (137 if container.killed else 0)
                )

        return frames()

    def exec_inspect(self, exec_id):
        return {"ExitCode": self.exit_codes.get(exec_id)}


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class FakeImages:
    def __init__(self, client: FakeClient):
        self.client = client

    def get(self, name: str):
        if name not in self.client.image_files:
            raise ImageNotFound(f"No such image: {name}")
        return types.SimpleNamespace(tags=[name])

    def pull(self, repository: str, tag: str = "latest"):
        self.client.pulled.append((repository, tag))
        self.client.image_files[f"{repository}:{tag}"] = {}


class FakeContainers:
    def __init__(self, client: FakeClient):
        self.client = client

    def run(self, image: str, **kwargs):
        if self.client.run_error is not None:
            raise self.client.run_error
        container = FakeContainer(self.client, image, kwargs)
        self.client.started.append(container)
        self.client.by_id[container.id] = container
        return container


class FakeClient:
    def __init__(self, images: dict[str, dict[str, bytes]] | None = None, responder=None):
        self.image_files = dict(images or {})
        self.images = FakeImages(self)
        self.containers = FakeContainers(self)
        self.api = FakeAPI(self)
        self.responder = responder or (lambda container, run: (0, b"ok\n", b""))
        self.started: list[FakeContainer] = []
        self.by_id: dict[str, FakeContainer] = {}
        self.pulled: list[tuple[str, str]] = []
        self.reverts: list[tuple[str, list[str]]] = []
        self.run_error: Exception | None = None


# ---------------------------------------------------------------------- fixtures

TASK = types.SimpleNamespace(
    instance_id="django__django-11099", repo="django/django", base_commit="abc123"
)
IMAGE = swebench_image_name(TASK.instance_id)
BASE_FILES = {
    "a.py": b"A = 1\n",
    "b.py": b"B = 1\n",
    "pkg/__init__.py": b"",
    "pkg/mod.py": b"M = 1\n",
    "docs/one.txt": b"one\n",
    "docs/two.txt": b"two\n",
}


@pytest.fixture
def tree(tmp_path):
    """A base checkout, a copy-on-write workspace over it (the real class), and a /tmp."""
    base = tmp_path / "base"
    for rel, data in BASE_FILES.items():
        (base / rel).parent.mkdir(parents=True, exist_ok=True)
        (base / rel).write_bytes(data)
    ws = CopyWorkspace(base, tmp_path / "state")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    return types.SimpleNamespace(base=base, ws=ws, root=ws.root, tmp=tmp)


@pytest.fixture
def client():
    return FakeClient({IMAGE: {f"/testbed/{k}": v for k, v in BASE_FILES.items()}})


@pytest.fixture
def executor(client):
    ex = DockerExecutor(client=client, timeout=30)
    yield ex
    ex.close()


def request(tree, *argv: str, session: str = "s1", **kw) -> ExecutionRequest:
    fields = {
        "argv": argv or ("python", "x.py"),
        "cwd": "/testbed",
        "workspace": tree.root,
        "tmp": tree.tmp,
        "task": TASK,
        "session_id": session,
        "base": tree.base,
        "base_commit": TASK.base_commit,
        "changes": tree.ws.changes,
    }
    fields.update(kw)
    return ExecutionRequest(**fields)


def ok(result) -> None:
    assert result.info["status"] == "ok", result.stderr
    assert result.info["executor"] == "docker" and result.info["executed"] is True


# ---------------------------------------------------------------------- container start


def test_first_command_starts_one_container_per_session(executor, client, tree):
    res = executor.execute(request(tree, "python", "-c", "print(1)"))
    ok(res)
    assert (res.stdout, res.stderr, res.exit_code) == ("ok\n", "", 0)
    assert res.info["image"] == IMAGE and res.info["latency_s"] >= 0
    (container,) = client.started
    assert container.image == IMAGE
    kw = container.kwargs
    assert kw["entrypoint"] == ["bash", "-c", KEEPALIVE_SCRIPT] and kw["detach"] is True
    assert kw["network_disabled"] is True and kw["mem_limit"] == "4g"
    assert kw["labels"]["sweworld.session"] == "s1"
    assert kw["working_dir"] == "/testbed"
    run = container.runs[0]
    assert run.argv == ["python", "-c", "print(1)"]
    assert run.activate == DEFAULT_ACTIVATE and run.limit == "30"
    ok(executor.execute(request(tree, "python", "-V")))
    ok(executor.execute(request(tree, "python", "-V", session="s2")))
    assert len(client.started) == 2 and len(container.runs) == 2
    assert set(executor.containers()) == {"s1", "s2"}


def test_image_options(client, tree):
    local = swebench_image_name(TASK.instance_id, namespace=None)
    only_local = FakeClient({local: {}})
    ex = DockerExecutor(client=only_local)
    ok(ex.execute(request(tree)))
    assert only_local.started[0].image == local  # the harness's local key is found too

    named = FakeClient({"my/image:1": {}})
    ok(DockerExecutor(client=named, image="my/image:1").execute(request(tree)))
    ok(DockerExecutor(client=named, image=lambda task: "my/image:1").execute(request(tree)))

    ex = DockerExecutor(client=client, network=True, mem_limit=None, pids_limit=512)
    ok(ex.execute(request(tree)))
    kw = client.started[-1].kwargs
    assert kw["network_disabled"] is False and "mem_limit" not in kw and kw["pids_limit"] == 512

    pulled = FakeClient()
    ex = DockerExecutor(client=pulled, pull=True)
    ok(ex.execute(request(tree)))
    assert pulled.pulled == [("swebench/sweb.eval.x86_64.django_1776_django-11099", "latest")]


# ---------------------------------------------------------------------- sync


def test_sync_written_deleted_and_reverted_files_across_calls(executor, client, tree):
    root = tree.root
    (root / "a.py").write_text("A = 2\n")  # modified
    (root / "new").mkdir()
    (root / "new" / "n.py").write_text("N = 1\n")  # added, in a new directory
    (root / "run.sh").write_text("#!/bin/sh\n")
    (root / "run.sh").chmod(0o755)
    os.symlink("a.py", root / "alias.py")  # a symlink stays a symlink
    (root / "b.py").unlink()  # deleted
    shutil.rmtree(root / "docs")  # a deleted directory goes at once
    ok(executor.execute(request(tree)))
    (c,) = client.started
    assert c.text("/testbed/a.py") == "A = 2\n"
    assert c.text("/testbed/new/n.py") == "N = 1\n"
    assert c.files["/testbed/run.sh"][2] == 0o755
    assert c.files["/testbed/alias.py"][:2] == ("link", "a.py")
    assert "/testbed/b.py" not in c.files
    assert not any(p.startswith("/testbed/docs") for p in c.files)
    assert ["rm", "-rf", "--", "/testbed/b.py", "/testbed/docs"] in c.execs
    assert sorted(c.archives[0]) == [
        "/testbed/a.py",
        "/testbed/alias.py",
        "/testbed/new",  # a new directory goes as one (it could be empty)
        "/testbed/new/n.py",
        "/testbed/run.sh",
    ]

    # nothing changed: nothing is sent or removed again
    execs_before = len(c.execs)
    res = executor.execute(request(tree))
    ok(res)
    # only the run and the listing of what it changed
    assert len(c.archives) == 1 and len(c.execs) == execs_before + 2
    assert c.execs[-1][3] == LIST_MARKER and c.runs[-1].marker
    assert res.info["sync"]["sent"] == 0

    # one file changed: only it is sent
    (root / "new" / "n.py").write_text("N = 22\n")
    ok(executor.execute(request(tree)))
    assert c.archives[-1] == ["/testbed/new/n.py"] and c.text("/testbed/new/n.py") == "N = 22\n"

    # reverted: a.py and b.py back as in the base (same bytes, mode and mtime), the new
    # directory removed; the container gets the base's files back and loses the new ones
    shutil.copy2(tree.base / "a.py", root / "a.py")
    shutil.copy2(tree.base / "b.py", root / "b.py")
    shutil.rmtree(root / "new")
    assert "a.py" not in tree.ws.changes().written
    res = executor.execute(request(tree))
    ok(res)
    assert c.text("/testbed/a.py") == "A = 1\n" and c.text("/testbed/b.py") == "B = 1\n"
    assert not any(p.startswith("/testbed/new") for p in c.files)
    assert ["rm", "-rf", "--", "/testbed/new"] in c.execs
    assert res.info["sync"]["reverted"] == 4  # a.py, b.py, new/n.py and the directory new
    assert client.reverts == []  # the base checkout was read, git was not needed


def test_revert_uses_git_in_the_container_without_a_base_checkout(executor, client, tree):
    (tree.root / "a.py").write_text("A = 3\n")
    (tree.root / "c.py").write_text("C = 1\n")
    ok(executor.execute(request(tree, base=None)))
    (c,) = client.started
    assert c.text("/testbed/a.py") == "A = 3\n" and "/testbed/c.py" in c.files
    shutil.copy2(tree.base / "a.py", tree.root / "a.py")
    (tree.root / "c.py").unlink()
    ok(executor.execute(request(tree, base=None)))
    assert client.reverts == [("abc123", ["a.py", "c.py"])]
    assert c.text("/testbed/a.py") == "A = 1\n" and "/testbed/c.py" not in c.files


def test_tmp_is_mirrored(executor, client, tree):
    (tree.tmp / "repro.py").write_text("print('bug')\n")
    (tree.tmp / "d").mkdir()
    (tree.tmp / "d" / "x.txt").write_text("x")
    ok(executor.execute(request(tree, "python", "/tmp/repro.py")))
    (c,) = client.started
    assert c.text("/tmp/repro.py") == "print('bug')\n" and c.text("/tmp/d/x.txt") == "x"
    ok(executor.execute(request(tree)))
    assert len(c.archives) == 1  # unchanged: not sent again
    (tree.tmp / "repro.py").write_text("print('bug!')\n")
    shutil.rmtree(tree.tmp / "d")
    ok(executor.execute(request(tree)))
    assert c.archives[-1] == ["/tmp/repro.py"] and c.text("/tmp/repro.py") == "print('bug!')\n"
    assert ["rm", "-rf", "--", "/tmp/d"] in c.execs and "/tmp/d/x.txt" not in c.files


def test_symlinks_are_never_followed_out_of_the_workspace(executor, client, tree, tmp_path):
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "key").write_text("SECRET")
    os.symlink(secret, tree.root / "escape")
    os.symlink(secret / "key", tree.root / "key_link")
    listed = WorkspaceChanges(written=("escape/key", "key_link", "../outside", "/etc/passwd"))
    res = executor.execute(request(tree, changes=lambda: listed))
    ok(res)
    (c,) = client.started
    assert "/testbed/escape/key" not in c.files
    assert c.files["/testbed/key_link"][:2] == ("link", str(secret / "key"))
    assert all("SECRET" not in str(v[1]) for v in c.files.values())
    assert res.info["sync"]["skipped"] == 1  # escape/key; the unsafe names never got so far


def test_a_container_that_disappeared_is_replaced_and_fully_synced(executor, client, tree):
    (tree.root / "a.py").write_text("A = 5\n")
    ok(executor.execute(request(tree)))
    first = client.started[0]
    first.removed = True  # e.g. `docker rm -f` from outside
    ok(executor.execute(request(tree)))
    second = client.started[1]
    assert second.text("/testbed/a.py") == "A = 5\n" and second.runs
    second.stopped = True  # stopped but still there
    ok(executor.execute(request(tree)))
    assert len(client.started) == 3 and client.started[2].text("/testbed/a.py") == "A = 5\n"


# ---------------------------------------------------------------------- the command


def sandbox_path() -> str:
    from sweworld.sandbox.bwrap import SANDBOX_PATH

    return SANDBOX_PATH


def test_env_cwd_argv_and_path(client, tree):
    ex = DockerExecutor(client=client, workdir="/work", activate="")
    env = {"FOO": "bar baz", "PATH": f"/opt/x:{sandbox_path()}:/opt/y", "BAD-NAME": "1"}
    (tree.root / "src").mkdir()
    (tree.root / "src" / "m.py").write_text("pass\n")
    res = ex.execute(
        request(
            tree, "/usr/bin/python3", "/testbed/src/m.py", "--flag", cwd="/testbed/src", env=env
        )
    )
    ok(res)
    (c,) = client.started
    run = c.runs[0]
    assert run.argv == ["python3", "/work/src/m.py", "--flag"]
    assert run.cwd == "/work/src" and run.workdir == "/work" and run.activate == ""
    assert run.env == {"FOO": "bar baz"}
    assert (run.path_front, run.path_back) == ("/opt/x", "/opt/y")
    assert c.text("/work/src/m.py") == "pass\n"
    ok(ex.execute(request(tree, "ls", cwd="/tmp/work")))
    assert c.runs[-1].cwd == "/tmp/work" and c.runs[-1].path_front == ""


def test_stdin_goes_through_a_file_that_is_removed(executor, client, tree):
    ok(executor.execute(request(tree, "python", "-", stdin=b"print('from stdin')\n")))
    (c,) = client.started
    assert c.runs[0].stdin == b"print('from stdin')\n"
    assert f"{CONTROL_DIR}/stdin" not in c.files
    ok(executor.execute(request(tree, "python", "x.py")))
    assert c.runs[1].stdin == b"" and len(c.archives) == 1


def test_timeout_exit_code_and_message(tree):
    fake = FakeClient({IMAGE: {}}, responder=lambda c, run: (124, b"partial\n", b""))
    res = DockerExecutor(client=fake, timeout=7).execute(request(tree, "python", "slow.py"))
    assert res.info["status"] == "timeout" and res.exit_code == 124
    assert res.stdout == "partial\n"
    assert "did not finish within 7 s" in res.stderr and "`python slow.py`" in res.stderr
    assert fake.started[0].runs[0].limit == "7"


def test_exit_codes_and_separate_streams(tree):
    fake = FakeClient({IMAGE: {}}, responder=lambda c, run: (3, b"out\xff\n", b"err\n"))
    res = DockerExecutor(client=fake).execute(request(tree))
    assert (res.stdout, res.stderr, res.exit_code) == ("out\ufffd\n", "err\n", 3)
    assert res.info["status"] == "ok"


def test_output_is_capped_and_a_flood_is_stopped(tree):
    def flood(container, run):
        def chunks():
            while not container.killed:
                yield b"x" * 300, None
                yield None, b"e"

        return chunks()

    fake = FakeClient({IMAGE: {}}, responder=flood)
    res = DockerExecutor(client=fake, max_output_bytes=1000).execute(request(tree, "yes"))
    assert res.info["status"] == "output_truncated" and res.exit_code == 1
    assert res.stdout == "x" * 1000
    assert res.stderr.startswith("eeee") and "printed more than 1000 bytes" in res.stderr
    assert list(KILL_ARGV) in fake.started[0].execs

    under = FakeClient({IMAGE: {}}, responder=lambda c, run: (0, b"y" * 1000, b""))
    res = DockerExecutor(client=under, max_output_bytes=1000).execute(request(tree))
    assert res.info["status"] == "ok" and len(res.stdout) == 1000


def test_commands_of_one_session_never_overlap(tree):
    def slow(container, run):
        assert container.busy.acquire(blocking=False), "two commands ran at once"
        container.busy.release()
        time.sleep(0.01)
        return 0, b"ok\n", b""

    fake = FakeClient({IMAGE: {}}, responder=slow)
    ex = DockerExecutor(client=fake)
    results = []

    def worker(session: str) -> None:
        for _ in range(5):
            results.append(ex.execute(request(tree, session=session)))

    threads = [threading.Thread(target=worker, args=(f"s{i % 3}",)) for i in range(9)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 45 and all(r.info["status"] == "ok" for r in results)
    assert len(fake.started) == 3  # one container per session, however many threads


# ---------------------------------------------------------------------- failures


def test_failures_become_env_failed_results(client, tree, monkeypatch):
    def failed(res, *needles):
        assert res.info["status"] == "env_failed" and res.info["executed"] is False
        assert res.exit_code == 1
        for needle in needles:
            assert needle in res.stderr, res.stderr

    missing = FakeClient()
    res = DockerExecutor(client=missing).execute(request(tree))
    failed(res, "is not present", f"docker pull {IMAGE}", "pull=True")

    res = DockerExecutor(client=client).execute(request(tree, task=None))
    failed(res, "no image", "image=")

    client.run_error = APIError("OCI runtime create failed: no sleep here")
    failed(DockerExecutor(client=client).execute(request(tree)), "failed to start", "no sleep")
    client.run_error = None

    def broken_changes():
        raise OSError("workspace is gone")

    failed(
        DockerExecutor(client=client).execute(request(tree, changes=broken_changes)),
        "reading the session's changes failed",
        "workspace is gone",
    )

    def refuse(path, data):
        raise APIError("disk full")

    ex = DockerExecutor(client=client)
    (tree.root / "a.py").write_text("A = 9\n")
    real_run = client.containers.run

    def run_with_broken_archive(image, **kwargs):
        container = real_run(image, **kwargs)
        container.put_archive = refuse
        return container

    monkeypatch.setattr(client.containers, "run", run_with_broken_archive)
    failed(ex.execute(request(tree)), "syncing the session's files", "disk full")
    assert client.started[-1].removed  # a container in an unknown state is not reused


def test_missing_package_and_unreachable_engine(tree, monkeypatch):
    monkeypatch.setitem(sys.modules, "docker", None)  # `import docker` raises ImportError
    res = DockerExecutor().execute(request(tree))
    assert res.info["status"] == "env_failed" and INSTALL_HINT in res.stderr
    assert "`docker` Python package" in res.stderr

    def from_env(**kwargs):
        raise DockerException("Error while fetching server API version: connection refused")

    monkeypatch.setitem(sys.modules, "docker", types.SimpleNamespace(from_env=from_env))
    res = DockerExecutor().execute(request(tree))
    assert res.info["status"] == "env_failed"
    assert "cannot reach the Docker engine" in res.stderr and "connection refused" in res.stderr


def test_close_session_and_close_remove_containers(executor, client, tree):
    ok(executor.execute(request(tree, session="a")))
    ok(executor.execute(request(tree, session="b")))
    first, second = client.started
    executor.close_session("a")
    assert first.removed and not second.removed and set(executor.containers()) == {"b"}
    executor.close_session("never-opened")
    executor.close()
    assert second.removed and executor.containers() == {}


# ---------------------------------------------------------------------- through a session


@requires_sandbox
def test_a_session_drives_the_container(manager, toy_task):
    image = swebench_image_name(toy_task.instance_id)
    fake = FakeClient({image: {}}, responder=lambda c, run: (0, b"from docker\n", b""))
    executor = DockerExecutor(client=fake)
    with manager.open(toy_task, executor=executor) as sess:
        out = sess.run("cd stockroom && FOO=bar python -c 'print(1)' a")
        assert out.stdout == "from docker\n" and out.exit_code == 0
        call = out.info["execution_calls"][0]
        assert call["executor"] == "docker" and call["info"]["status"] == "ok"
        (c,) = fake.started
        run = c.runs[0]
        assert run.argv == ["python", "-c", "print(1)", "a"]
        assert run.cwd == "/testbed/stockroom" and run.env.get("FOO") == "bar"
        sess.run("printf 'print(2)\\n' > /tmp/r.py && echo 'X = 1' > /testbed/new.py")
        sess.run("printf 'data' | python /tmp/r.py")
        assert c.text("/tmp/r.py") == "print(2)\n" and c.text("/testbed/new.py") == "X = 1\n"
        assert c.runs[-1].argv == ["python", "/tmp/r.py"] and c.runs[-1].stdin == b"data"
        sess.run("rm /testbed/new.py && python -c pass")
        assert "/testbed/new.py" not in c.files
    assert c.removed  # the session's end removed its container


# ---------------------------------------------------------------------- a real engine

REAL_IMAGE = os.environ.get("SWEWORLD_DOCKER_TEST_IMAGE", "")


def _real_engine():
    try:
        import docker
    except ImportError:
        return None, f"docker: the docker package is not installed ({INSTALL_HINT})"
    try:
        client = docker.from_env(timeout=20)
        client.ping()
    except Exception as exc:
        return None, f"docker: no Docker engine answers: {exc}"
    return client, ""


def _image_problem(client, image: str) -> str:
    if client is None:
        return ""
    try:
        client.images.get(image)
    except Exception as exc:
        return f"docker: image {image} is not on the engine: {exc}"
    return ""


_ENGINE, _ENGINE_PROBLEM = _real_engine()
_IMAGE_PROBLEM = (
    "docker: set SWEWORLD_DOCKER_TEST_IMAGE to an image with bash, coreutils and python "
    "(`sweworld docker build-test-image` makes one)"
    if not REAL_IMAGE
    else _image_problem(_ENGINE, REAL_IMAGE)
)
REAL_ACTIVATE = os.environ.get(
    "SWEWORLD_DOCKER_TEST_ACTIVATE", DEFAULT_ACTIVATE if "sweb.eval" in REAL_IMAGE else ""
)


_REAL_PROBLEM = _ENGINE_PROBLEM or _IMAGE_PROBLEM


@pytest.mark.docker
@pytest.mark.skipif(bool(_REAL_PROBLEM), reason=_REAL_PROBLEM)
class TestRealEngine:
    @pytest.fixture
    def real(self):
        ex = DockerExecutor(image=REAL_IMAGE, activate=REAL_ACTIVATE, client=_ENGINE, timeout=60)
        yield ex
        ex.close()

    def test_python_print(self, real, tree):
        res = real.execute(request(tree, "python", "-c", "print(1)"))
        ok(res)
        assert (res.stdout, res.exit_code) == ("1\n", 0), res.stderr

    def test_sync_round_trip(self, real, tree):
        probe = tree.root / "sweworld_probe"
        probe.mkdir()
        (probe / "hello.py").write_text("import sys\nprint('hello', sys.argv[1:])\n")
        os.symlink("hello.py", probe / "link.py")
        (tree.tmp / "t.py").write_text("print(open('/testbed/sweworld_probe/hello.py').read())")
        res = real.execute(request(tree, "python", "sweworld_probe/link.py", "a b"))
        ok(res)
        assert res.stdout == "hello ['a b']\n", res.stderr
        (probe / "hello.py").write_text("import os\nprint(os.getcwd(), os.environ['FOO'])\n")
        res = real.execute(
            request(
                tree,
                "python",
                "/testbed/sweworld_probe/hello.py",
                cwd="/testbed/sweworld_probe",
                env={"FOO": "bar"},
            )
        )
        assert res.stdout == "/testbed/sweworld_probe bar\n", res.stderr
        path = "import os; print(os.environ['PATH'].split(':')[0])"
        env = {"PATH": f"/opt/front:{sandbox_path()}"}
        res = real.execute(request(tree, "python", "-c", path, env=env))
        assert res.stdout == "/opt/front\n", res.stderr
        res = real.execute(request(tree, "python", "/tmp/t.py"))
        assert "os.getcwd()" in res.stdout, res.stderr
        script = "import sys; print(sys.stdin.read().upper())"
        res = real.execute(request(tree, "python", "-c", script, stdin=b"piped"))
        assert res.stdout == "PIPED\n", res.stderr
        shutil.rmtree(probe)
        check = "import os; print(os.path.exists('/testbed/sweworld_probe'))"
        res = real.execute(request(tree, "python", "-c", check))
        assert res.stdout == "False\n", res.stderr

    def test_timeout_and_flood(self, tree):
        ex = DockerExecutor(
            image=REAL_IMAGE,
            activate=REAL_ACTIVATE,
            client=_ENGINE,
            timeout=3,
            max_output_bytes=10_000,
        )
        try:
            t0 = time.monotonic()
            res = ex.execute(request(tree, "python", "-c", "import time; time.sleep(60)"))
            assert res.info["status"] == "timeout" and res.exit_code == 124, res.stderr
            assert time.monotonic() - t0 < 20
            flood = "import sys\nwhile True: sys.stdout.write('x' * 1000)"
            res = ex.execute(request(tree, "python", "-c", flood))
            assert res.info["status"] == "output_truncated" and len(res.stdout) == 10_000
            res = ex.execute(request(tree, "python", "-c", "print('after')"))
            assert res.stdout == "after\n", res.stderr  # the container is still usable
        finally:
            ex.close()

    def test_leftover_processes_are_killed_when_the_command_ends(self, real, tree):
        # a child holding the output pipe does not keep the command open
        t0 = time.monotonic()
        spawn = "import subprocess; subprocess.Popen(['sleep', '600']); print('spawned')"
        res = real.execute(request(tree, "python", "-c", spawn))
        assert res.stdout == "spawned\n" and res.info["status"] == "ok", res.stderr
        assert time.monotonic() - t0 < 30
        listing = (
            "import os\n"
            "for p in os.listdir('/proc'):\n"
            "    if p.isdigit():\n"
            "        status = open(f'/proc/{p}/status').read()\n"
            "        cmd = open(f'/proc/{p}/cmdline').read().replace(chr(0), ' ')\n"
            "        print(status.split('State:')[1].split()[0], cmd)\n"
        )
        res = real.execute(request(tree, "python", "-c", listing))
        processes = res.stdout.splitlines()
        assert processes and not any("sleep 600" in p for p in processes), processes
        assert not any(p.startswith("Z") for p in processes), processes  # orphans reaped

    def test_a_removed_container_is_replaced(self, real, tree):
        ok(real.execute(request(tree, "python", "-c", "pass")))
        real.containers()["s1"].remove(force=True)
        res = real.execute(request(tree, "python", "-c", "print(2)"))
        assert res.stdout == "2\n", res.stderr


@pytest.mark.docker
@pytest.mark.skipif(_ENGINE is None, reason=_ENGINE_PROBLEM or "docker: no engine")
@requires_sandbox
def test_real_session_on_the_toy_task(manager, toy_task):
    """The toy task in a real container: needs an image named as SWE-bench would name it
    (``swebench/sweb.eval.x86_64.sweworld_1776_stockroom-1:latest``) with the toy repository
    at ``/testbed``, pytest, and the SWE-bench layout's ``/opt/miniconda3/bin/activate``."""
    image = swebench_image_name(toy_task.instance_id)
    problem = _image_problem(_ENGINE, image)
    if problem:
        pytest.skip(problem)
    executor = DockerExecutor(client=_ENGINE, timeout=120)
    try:
        with manager.open(toy_task, executor=executor) as sess:
            out = sess.run("python -m pytest -q -p no:cacheprovider tests/test_textutil.py")
            assert out.exit_code == 0 and "passed" in out.stdout, out.stdout + out.stderr
            path = "/testbed/stockroom/textutil.py"
            sess.write_file(
                path,
                sess.read_file(path).replace(
                    'return re.sub(r"[^a-z0-9]", separator, ascii_text.lower())', 'return "edited"'
                ),
            )
            edited = sess.run(
                "python -c 'from stockroom.textutil import slugify; print(slugify(\"A\"))'"
            )
            assert edited.stdout == "edited\n", edited.stderr
            failing = sess.run("python -m pytest -q -p no:cacheprovider tests/test_textutil.py")
            assert failing.exit_code == 1 and "failed" in failing.stdout
            sess.run("git checkout -- stockroom/textutil.py")
            again = sess.run("python -m pytest -q -p no:cacheprovider tests/test_textutil.py")
            assert again.exit_code == 0, again.stdout + again.stderr
    finally:
        executor.close()


@pytest.mark.docker
@pytest.mark.skipif(_ENGINE is None, reason=_ENGINE_PROBLEM or "docker: no engine")
def test_real_git_revert_on_the_toy_image(manager, toy_task, tmp_path):
    """Without a base checkout in the request, reverted files come back from git."""
    image = swebench_image_name(toy_task.instance_id)
    problem = _image_problem(_ENGINE, image)
    if problem:
        pytest.skip(problem)
    base = manager.checkout(toy_task).path
    ws = CopyWorkspace(base, tmp_path / "state")
    tree = types.SimpleNamespace(base=base, ws=ws, root=ws.root, tmp=tmp_path / "tmp")
    readme = (base / "README.md").read_text()
    executor = DockerExecutor(client=_ENGINE, timeout=60)
    show = ("python", "-c", "print(open('/testbed/README.md').read(), end='')")
    try:
        (ws.root / "README.md").write_text("changed\n")
        res = executor.execute(request(tree, *show, task=toy_task, base=None))
        assert res.stdout == "changed\n", res.stderr
        shutil.copy2(base / "README.md", ws.root / "README.md")
        res = executor.execute(request(tree, *show, task=toy_task, base=None))
        assert res.stdout == readme, res.stderr
        assert res.info["sync"]["reverted"] == 1
    finally:
        executor.close()


@pytest.mark.docker
@pytest.mark.skipif(_ENGINE is None, reason=_ENGINE_PROBLEM or "docker: no engine")
@requires_sandbox
def test_real_a_directory_replaced_by_a_symlink_comes_back(manager, toy_task):
    """A directory the session replaced with a symlink, then restored: the container's
    symlink goes (found on the real engine: the restored files were written through it)."""
    image = swebench_image_name(toy_task.instance_id)
    problem = _image_problem(_ENGINE, image)
    if problem:
        pytest.skip(problem)
    base = manager.checkout(toy_task).path
    expected = {d: sorted(os.listdir(base / d)) for d in ("tests", "stockroom")}
    show = (
        "python -c \"import os, json; print(json.dumps([os.path.islink('tests'), "
        "{d: sorted(e for e in os.listdir(d) if e != '__pycache__') "
        "for d in ('tests', 'stockroom')}]))\""
    )
    executor = DockerExecutor(client=_ENGINE, timeout=60)
    try:
        with manager.open(toy_task, executor=executor) as sess:
            import json

            assert json.loads(sess.run(show).stdout) == [False, expected]
            sess.run("rm -r tests && ln -s stockroom tests")
            islink, _ = json.loads(sess.run(show).stdout)
            assert islink
            sess.run("rm tests && git checkout -- tests")
            out = sess.run(show)
            assert json.loads(out.stdout) == [False, expected], out.stderr
    finally:
        executor.close()


@pytest.mark.docker
@pytest.mark.skipif(_ENGINE is None, reason=_ENGINE_PROBLEM or "docker: no engine")
@requires_sandbox
def test_real_a_file_replaced_by_a_directory_and_back(manager, toy_task):
    """A base file the session made a directory of (found on the real engine: the sync
    failed with "not a directory"), then the base's file again."""
    image = swebench_image_name(toy_task.instance_id)
    problem = _image_problem(_ENGINE, image)
    if problem:
        pytest.skip(problem)
    readme = (manager.checkout(toy_task).path / "README.md").read_text()
    show = "python -c \"import os; print(os.path.isdir('README.md'), open('README.md/x').read())\""
    executor = DockerExecutor(client=_ENGINE, timeout=60)
    try:
        with manager.open(toy_task, executor=executor) as sess:
            assert sess.run("python -c pass").exit_code == 0  # the container is up
            started = [c.id for c in executor.containers().values()]
            sess.run("rm README.md && mkdir README.md && echo hi > README.md/x")
            out = sess.run(show)
            assert (out.exit_code, out.stdout) == (0, "True hi\n\n"), out.stderr
            sess.run("echo more > README.md/y")  # the directory is not removed again
            out = sess.run("python -c \"import os; print(sorted(os.listdir('README.md')))\"")
            assert out.stdout == "['x', 'y']\n", out.stderr
            sess.run("rm -r README.md && git checkout README.md")
            out = sess.run("python -c \"print(open('README.md').read(), end='')\"")
            assert out.stdout == readme, out.stderr
            assert [c.id for c in executor.containers().values()] == started  # never replaced
    finally:
        executor.close()


@pytest.mark.docker
@pytest.mark.skipif(_ENGINE is None, reason=_ENGINE_PROBLEM or "docker: no engine")
@requires_sandbox
def test_real_an_empty_directory_in_tmp_is_there_for_the_command(manager, toy_task):
    """``mkdir /tmp/out`` then a command writing into it (found on the real engine: only
    files were mirrored, so the command failed with FileNotFoundError)."""
    image = swebench_image_name(toy_task.instance_id)
    problem = _image_problem(_ENGINE, image)
    if problem:
        pytest.skip(problem)
    write = "python -c \"open('/tmp/out/deep/x', 'w').write('1'); print('wrote')\""
    executor = DockerExecutor(client=_ENGINE, timeout=60)
    try:
        with manager.open(toy_task, executor=executor) as sess:
            out = sess.run(f"mkdir -p /tmp/out/deep && chmod 700 /tmp/out && {write}")
            assert (out.exit_code, out.stdout) == (0, "wrote\n"), out.stderr
            mode = "python -c \"import os; print(oct(os.stat('/tmp/out').st_mode & 0o777))\""
            assert sess.run(mode).stdout == "0o700\n"
            sess.run("rm -r /tmp/out")
            gone = sess.run("python -c \"import os; print(os.path.exists('/tmp/out'))\"")
            assert gone.stdout == "False\n", gone.stderr
    finally:
        executor.close()


# ---------------------------------------------------------------------- copy-back


@pytest.mark.docker
@pytest.mark.skipif(bool(_REAL_PROBLEM), reason=_REAL_PROBLEM)
class TestRealCopyBack:
    """What a command writes in the container comes back into the session's trees."""

    @pytest.fixture
    def real(self, tree):
        # the test image lacks the fixture's base files: the first sync sends them (their
        # times changed), or the container's tree would have them deleted
        for rel in BASE_FILES:
            os.utime(tree.root / rel, ns=(10**9, 10**9))
        ex = DockerExecutor(
            image=REAL_IMAGE,
            activate=REAL_ACTIVATE,
            client=_ENGINE,
            timeout=60,
            copy_back_bytes=64 * 1024,
        )
        yield ex
        ex.close()

    def test_files_written_and_deleted_come_back_once(self, real, tree):
        script = (
            "import os; open('/tmp/x', 'w').write('tmp\\n'); "
            "open('/testbed/new.py', 'w').write('N = 1\\n'); os.chmod('/testbed/new.py', 0o4755); "
            "os.makedirs('/testbed/made/deep'); os.remove('/tmp/gone.txt')"
        )
        (tree.tmp / "gone.txt").write_text("bye\n")
        res = real.execute(request(tree, "python", "-c", script))
        ok(res)
        assert res.exit_code == 0, res.stderr
        assert (tree.tmp / "x").read_text() == "tmp\n"
        assert (tree.root / "new.py").read_text() == "N = 1\n"
        assert stat.S_IMODE((tree.root / "new.py").stat().st_mode) == 0o755  # no setuid
        assert (tree.root / "made" / "deep").is_dir()
        assert not (tree.tmp / "gone.txt").exists()
        sync = res.info["sync"]
        assert sync["copied_back"] >= 4 and sync["copy_back_deleted"] == 1, sync
        assert "made/deep" in tree.ws.changes().dirs
        # nothing is sent back to the container for what came from it
        again = real.execute(request(tree, "cat", "/tmp/x", "/testbed/new.py"))
        assert again.stdout == "tmp\nN = 1\n", again.stderr
        assert again.info["sync"]["sent"] == again.info["sync"]["tmp_sent"] == 0, again.info
        assert again.info["sync"]["copied_back"] == 0

    def test_a_huge_file_hits_the_cap_and_is_named(self, real, tree):
        script = "open('/tmp/big', 'wb').write(b'x' * 200000); open('/tmp/small', 'w').write('s')"
        res = real.execute(request(tree, "python", "-c", script))
        ok(res)
        assert (tree.tmp / "small").read_text() == "s"
        assert not (tree.tmp / "big").exists()
        assert res.info["sync"]["copy_back_skipped"] == 1
        (named,) = res.info["copy_back_skipped"]
        assert named.startswith("/tmp/big:") and "cap" in named

    def test_symlinks_come_back_as_symlinks_and_nothing_lands_outside(self, real, tree, tmp_path):
        outside = tmp_path / "outside"
        outside.mkdir()
        os.symlink(outside, tree.root / "trap")  # the session's link to a host folder
        script = (
            "ln -s /etc/passwd /testbed/pw && rm /testbed/trap && mkdir /testbed/trap && "
            "echo inside > /testbed/trap/f && mkfifo /tmp/fifo"
        )
        res = real.execute(request(tree, "bash", "-c", script))
        ok(res)
        assert res.exit_code == 0, res.stderr
        assert os.readlink(tree.root / "pw") == "/etc/passwd"  # the link, not its target
        assert not (tree.root / "trap").is_symlink()
        assert (tree.root / "trap" / "f").read_text() == "inside\n"
        assert list(outside.iterdir()) == []
        assert not os.path.lexists(tree.tmp / "fifo")
        assert any(s.startswith("/tmp/fifo:") for s in res.info["copy_back_skipped"])

    def test_a_new_empty_directory_is_synced_and_removed(self, real, tree):
        (tree.root / "out").mkdir()
        res = real.execute(request(tree, "bash", "-c", "echo 1 > out/x && cat out/x"))
        assert (res.exit_code, res.stdout) == (0, "1\n"), res.stderr
        assert (tree.root / "out" / "x").read_text() == "1\n"
        shutil.rmtree(tree.root / "out")
        res = real.execute(request(tree, "bash", "-c", "test -e out && echo there || echo gone"))
        assert res.stdout == "gone\n", res.stderr


@pytest.mark.docker
@pytest.mark.skipif(_ENGINE is None, reason=_ENGINE_PROBLEM or "docker: no engine")
@requires_sandbox
def test_real_session_sees_what_its_commands_wrote(manager, toy_task):
    """Through a session (overlay workspace where it can mount): the files a command writes
    in the container are read by the session's file operations, and a deletion reaches the
    patch; a directory made by a file operation is there for the next command."""
    image = swebench_image_name(toy_task.instance_id)
    problem = _image_problem(_ENGINE, image)
    if problem:
        pytest.skip(problem)
    executor = DockerExecutor(client=_ENGINE, timeout=60)
    try:
        with manager.open(toy_task, executor=executor) as sess:
            write = (
                "python -c \"open('/tmp/sweworld_out.txt', 'w').write('out'); "
                "open('/testbed/new_module.py', 'w').write('X = 1\\n')\""
            )
            assert sess.run(write).exit_code == 0
            assert sess.run("cat /tmp/sweworld_out.txt").stdout == "out"  # cat: a file op
            assert sess.read_file("/testbed/new_module.py") == "X = 1\n"
            gone = sess.run("python -c \"import os; os.remove('stockroom/textutil.py')\"")
            assert gone.exit_code == 0, gone.stderr
            with pytest.raises(OSError):
                sess.read_file("/testbed/stockroom/textutil.py")
            patch = sess.get_patch()
            assert "deleted file mode" in patch and "stockroom/textutil.py" in patch, patch
            out = sess.run(
                "mkdir made && python -c \"open('made/x', 'w').write('1')\" && cat made/x"
            )
            assert (out.exit_code, out.stdout) == (0, "1"), out.stderr
    finally:
        executor.close()
