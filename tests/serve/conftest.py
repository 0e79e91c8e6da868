"""Fixtures of the service tests."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _small_session_disks(monkeypatch):
    """Sessions of a 64 MiB disk quota and 8 MiB scratch mounts (the defaults: 1 GiB and
    64 MiB). The world service refuses a session that would not fit its disk budget (half
    the memory available: each session's disk is RAM), which on a small host holds ~8
    sessions of the defaults; these tests open more, and write little. A test that needs
    other sizes sets its own."""
    monkeypatch.setenv("SWEWORLD_DISK_MB", "64")
    monkeypatch.setenv("SWEWORLD_SCRATCH_MB", "8")
