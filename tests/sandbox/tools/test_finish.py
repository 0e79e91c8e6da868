from __future__ import annotations

from sweworld.sandbox.render import render_r2egym
from sweworld.sandbox.tools import run_tool


def test_submit(sandbox):
    r = run_tool("finish", sandbox.ctx, {"command": "submit", "result": "all done"})
    assert r.output == "<<<Finished>>>\n"
    assert r.done is True
    assert r.exit_code == 0
    assert r.info == {"result": "all done"}
    assert render_r2egym("finish", r.output, r.exit_code) == "<<< Finished >>>"


def test_submit_alias_and_default_command(sandbox):
    for name, params in (("submit", {}), ("finish", {}), ("finish", {"command": " submit "})):
        r = run_tool(name, sandbox.ctx, params)
        assert r.output == "<<<Finished>>>\n"
        assert r.done is True
        assert r.info == {"result": ""}


def test_unknown_command(sandbox):
    r = run_tool("finish", sandbox.ctx, {"command": "abort"})
    assert r.output == "Unknown command 'abort'. Only `submit` is supported.\n"
    assert r.exit_code == 1
    assert r.done is False


def test_unknown_parameter(sandbox):
    r = run_tool("finish", sandbox.ctx, {"command": "submit", "patch": "diff"})
    assert r.output == (
        "ERROR: Unknown parameter 'patch' for finish. Expected: finish(command, result).\n"
    )
    assert r.done is False
