"""The base file system of every task image (sweworld.execution.docker.base_image): the
debootstrap build's deadline, the build error, the base's Python and finishing touches."""

from __future__ import annotations

import os
import subprocess
import uuid

import pytest

from sweworld.execution.docker import base_image
from sweworld.execution.docker.base_image import ImageBuildError


@pytest.mark.skipif(os.geteuid() != 0, reason="the base file system is built as root")
def test_a_debootstrap_past_its_deadline_is_killed_with_its_children(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    marker = uuid.uuid4().hex
    fake = bin_dir / "debootstrap"  # like debootstrap: a child (dpkg) that runs on
    fake.write_text(f"#!/bin/sh\necho unpacking\nsh -c 'sleep 300; echo {marker}' &\nsleep 300\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    with pytest.raises(ImageBuildError, match="did not finish in 1 s") as info:
        base_image.build_base_rootfs(tmp_path / "cache", timeout=1)
    assert "unpacking" in info.value.log_tail
    left = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout
    assert left == "", "a child of the build outlived it"
    base = next((tmp_path / "cache").glob("base-*"))
    assert not list(base.glob(".build-*")) and not (base / "ok").exists()


def test_the_error_carries_the_log_tail():
    err = ImageBuildError("sweworld: the recipe failed", "line 1\nboom\n")
    assert err.log_tail == "line 1\nboom\n"
    assert str(err) == "sweworld: the recipe failed\nline 1\nboom"


def test_base_python_and_finishing_touches(tmp_path):
    rootfs = tmp_path / "rootfs"
    for name in ("python3.11", "python3.9", "python3", "python3-dist"):
        (rootfs / "usr/lib" / name).mkdir(parents=True)
    (rootfs / "etc").mkdir()
    (rootfs / "etc/resolv.conf").symlink_to("/run/systemd/resolve/stub-resolv.conf")
    (rootfs / "var/cache/apt/archives").mkdir(parents=True)
    (rootfs / "var/cache/apt/archives/python3.deb").write_text("deb")
    assert base_image.base_python(rootfs) == "3.11"
    base_image._finish_base(rootfs)
    assert not (rootfs / "var/cache/apt/archives/python3.deb").exists()
    assert (rootfs / "testbed").is_dir() and (rootfs / "opt/miniconda3").is_dir()
    resolv = rootfs / "etc/resolv.conf"
    assert resolv.is_file() and not resolv.is_symlink()  # a mount point for the host's
    assert os.readlink(rootfs / "usr/local/bin/python") == "/usr/bin/python3"
