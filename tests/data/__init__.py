"""Tests of sweworld.data, and builders of small synthetic mini-swe-agent runs on the toy task."""

from __future__ import annotations

import gzip
import io
import json
import tarfile
from pathlib import Path
from typing import Any

TOP = "mini-swe-agent-synthetic"

SYSTEM = "You are a helpful assistant that can interact with a computer shell."


def user_task(problem: str) -> dict[str, str]:
    return {
        "role": "user",
        "content": (
            "<pr_description>\nConsider the following PR description:\n"
            f"{problem}\n</pr_description>\n\n<instructions>...</instructions>"
        ),
    }


def action(command: str) -> dict[str, str]:
    return {"role": "assistant", "content": f"THOUGHT: next.\n\n```bash\n{command}\n```"}


def observation(returncode: int, output: str) -> dict[str, str]:
    return {
        "role": "user",
        "content": f"<returncode>{returncode}</returncode>\n<output>\n{output}</output>",
    }


def cut_observation(returncode: int, head: str, tail: str, elided: int) -> dict[str, str]:
    """mini-swe-agent's observation of a long output: its first and last 5,000 characters."""
    return {
        "role": "user",
        "content": (
            f"<returncode>{returncode}</returncode>\n<warning>\nThe output of your last "
            f"command was too long.\n</warning><output_head>\n{head[:5000]}\n</output_head>\n"
            f"<elided_chars>\n{elided} characters elided\n</elided_chars>\n"
            f"<output_tail>\n{tail[-5000:]}\n</output_tail>"
        ),
    }


FORMAT_ERROR = {
    "role": "user",
    "content": "Please always provide EXACTLY ONE action in triple backticks, found 2 actions.",
}


def trajectory(instance_id: str, turns: list[dict[str, str]], submission: str = "") -> dict:
    return {
        "instance_id": instance_id,
        "trajectory_format": "mini-swe-agent-1",
        "info": {"exit_status": "Submitted", "submission": submission},
        "messages": [{"role": "system", "content": SYSTEM}, *turns],
    }


def report(resolved: bool, f2p: list[str], p2p: list[str]) -> dict[str, Any]:
    return {
        "resolved": resolved,
        "tests_status": {
            "FAIL_TO_PASS": {
                "success": f2p if resolved else [],
                "failure": [] if resolved else f2p,
            },
            "PASS_TO_PASS": {"success": p2p, "failure": []},
        },
    }


def write_tarball(
    path: Path,
    members: list[tuple[str, bytes]],
    verified_rows: list[dict[str, Any]] | None = None,
) -> Path:
    """A tarball of ``(relative name, bytes)`` under :data:`TOP`, and the verified task file
    beside it when ``verified_rows`` is given."""
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members:
            info = tarfile.TarInfo(f"{TOP}/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    if verified_rows is not None:
        with gzip.open(path.parent / "swebench_verified_resolved_patches.jsonl.gz", "wt") as f:
            for row in verified_rows:
                f.write(json.dumps(row) + "\n")
    return path


def traj_member(instance_id: str, data: Any) -> tuple[str, bytes]:
    raw = data if isinstance(data, bytes) else json.dumps(data).encode()
    return f"trajs/{instance_id}/{instance_id}.traj.json", raw


def report_member(instance_id: str, data: Any) -> tuple[str, bytes]:
    raw = data if isinstance(data, bytes) else json.dumps(data).encode()
    return f"logs/{instance_id}/report.json", raw


PYTEST_HEAD = (
    "============================= test session starts ==============================\n"
    + ("tests/test_textutil.py::test_slugify_simple_words PASSED\n" * 120)
)
PYTEST_TAIL = (
    "FAILED tests/test_textutil.py::test_slugify_collapses_separators - AssertionError\n" * 60
    + "========================= 1 failed, 7 passed in 0.05s =========================\n"
)


def toy_turns(problem: str) -> list[dict[str, str]]:
    """A toy-task run: real edits (``sed -i``, a heredoc), execution steps with recorded
    outputs, a format error, a cut pytest output, a step with two execution commands, a
    hanging step, a step whose real part prints too, and the submission."""
    return [
        user_task(problem),
        action("echo hello"),  # 0: real, reproduced
        observation(0, "hello\n"),
        action("sed -i 's/def slugify(/def slugify_renamed(/' stockroom/textutil.py"),  # 1
        observation(0, ""),
        action('python -c "print(1)"'),  # 2: execution, after the sed
        observation(0, "1\n"),
        {"role": "assistant", "content": "```bash\nls\n```\n```bash\npwd\n```"},  # format error
        FORMAT_ERROR,
        action("cat > repro.py <<'EOF'\nprint('repro ran')\nEOF"),  # 3: real, a new file
        observation(0, ""),
        action("cd /testbed && python repro.py"),  # 4: execution, sees repro.py in the diff
        observation(0, "repro ran\n"),
        action("python -m pytest -rA tests/test_textutil.py"),  # 5: cut output
        cut_observation(1, PYTEST_HEAD, PYTEST_TAIL, 1234),
        action("python repro.py && python -c 'print(2)'"),  # 6: two execution commands
        observation(0, "repro ran\n2\n"),
        action("sleep 30"),  # 7: hangs past the step deadline
        observation(0, ""),
        action("echo before && python -c 'print(3)'"),  # 8: the real part prints too
        observation(0, "3\n"),
        action('python -c "import sys; sys.exit(3)"'),  # 9: a failing command
        observation(3, ""),
        action("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git add -A && git diff --cached"),
        {"role": "user", "content": "diff --git a/stockroom/textutil.py b/stockroom/textutil.py"},
    ]


def toy_source(tmp: Path, *, extra: list[tuple[str, bytes]] | None = None) -> Path:
    """A synthetic mini-swe-agent tarball holding one full run on the first toy task (with
    its report), plus ``extra`` members; the verified task file beside it."""
    from sweworld.tasks.toy import load_toy_tasks

    row = dict(load_toy_tasks()[0])
    iid = row["instance_id"]
    verified = {
        "instance_id": iid,
        "repo": row["repo"],
        "base_commit": row["base_commit"],
        "problem_statement": row["problem_statement"],
        "patch": row["patch"],
        "resolved_by": [
            {"name": "sys-a", "patch": row["patch"]},
            {"name": "sys-b", "patch": row["patch"]},
        ],
    }
    f2p = json.loads(row["FAIL_TO_PASS"])
    p2p = json.loads(row["PASS_TO_PASS"])
    members = [
        traj_member(
            iid, trajectory(iid, toy_turns(row["problem_statement"]), "diff --git a/x b/x")
        ),
        report_member(iid, report(False, f2p, p2p)),
        *(extra or []),
    ]
    return write_tarball(tmp / "run.tar.gz", members, [verified])
