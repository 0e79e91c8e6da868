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


def test_unknown_command_still_ends_the_episode_like_r2e_gym(sandbox):
    # R2E-Gym turns every finish call into `echo '<<<Finished>>>'` and its environment
    # ends the episode on any finish call: the observation and `done` always agree
    r = run_tool("finish", sandbox.ctx, {"command": "abort"})
    assert r.output == "<<<Finished>>>\n"
    assert (r.exit_code, r.done) == (0, True)
    assert r.info == {"result": "", "ignored_command": "abort"}
    assert render_r2egym("finish", r.output, r.exit_code) == "<<< Finished >>>"


def test_unknown_parameter_still_ends_the_episode(sandbox):
    r = run_tool("finish", sandbox.ctx, {"command": "submit", "patch": "diff", "result": 3})
    assert r.output == "<<<Finished>>>\n"
    assert r.done is True
    assert r.info == {"result": "3", "ignored_parameters": ["patch"]}
